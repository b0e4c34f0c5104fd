// The team event model: what every reader (gRPC WatchTeam, SSE, HTTP polling) serves, with the same seq.
// event_type names follow the roz TeamEvent oneof field names; task_* events are Cadre's additions.

export const TASK_STATUSES = ['queued', 'running', 'completed', 'failed', 'cancelled'] as const;
export type TaskStatus = (typeof TASK_STATUSES)[number];
export const TERMINAL_TASK_STATUSES: readonly TaskStatus[] = ['completed', 'failed', 'cancelled'];

export const WORKER_STATUSES = ['pending', 'running', 'completed', 'failed'] as const;
export type WorkerStatus = (typeof WORKER_STATUSES)[number];

/**
 * The phases of an agent, in the order of its plan: a worker only thinks; a lead that plans its team thinks
 * (plans), waits for its workers, then synthesizes their results. On gRPC, roz's WorkerPhase.phase carries the
 * phase's position here (roz numbers a worker's phases from 0) and phase_name carries the name.
 */
export const WORKER_PHASES = ['thinking', 'waiting_for_workers', 'synthesizing'] as const;
export type WorkerPhaseName = (typeof WORKER_PHASES)[number];

/** Why a worker failed; carried as WorkerFailed.reason. */
export type WorkerFailureReason =
  | 'model_error'
  | 'timeout'
  | 'cancelled'
  | 'worker_lost'
  | 'max_turns'
  | 'tool_error'
  | 'worker_shutdown'
  /** Redis could not take the attempt's writes (down, failing over): handed back, or failed once that recurs. */
  | 'redis_unavailable'
  | 'team_failed'
  | 'internal_error';

export interface TokenUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export const APPROVAL_STATUSES = ['pending', 'approved', 'denied', 'expired', 'cancelled'] as const;
export type ApprovalStatus = (typeof APPROVAL_STATUSES)[number];
/** How far an approval reaches: this call only, or the same tool and arguments for the rest of the task/session. */
export const APPROVAL_SCOPES = ['once', 'task', 'session'] as const;
export type ApprovalScope = (typeof APPROVAL_SCOPES)[number];

/** Payload per event type. worker_* events also carry worker_id and attempt on the envelope. */
export interface TeamEventPayloads {
  task_queued: { workspace_id: string; goal: string };
  worker_started: { host_id: string; role: string };
  worker_phase: { phase: WorkerPhaseName; mode: string; turn: number };
  worker_tool_call: { tool: string; call_id: string; arguments: string };
  worker_completed: { result: string; usage: TokenUsage };
  worker_failed: { reason: WorkerFailureReason; message: string };
  worker_exited: { parent_task_id: string };
  /** A tool call waits for an operator's decision (roz's WorkerApprovalRequested, tag 7). */
  worker_approval_requested: { approval_id: string; tool_name: string; call_id: string; arguments: string; reason: string; timeout_secs: number };
  /** The decision, a timeout (`expired`) or a cancel (`cancelled`) (roz's WorkerApprovalResolved, tag 8). */
  worker_approval_resolved: {
    approval_id: string; approved: boolean; status: ApprovalStatus; reason: string; decided_by: string;
    /** The amended arguments (a JSON object's text) the approver ran the call with, if any. */
    modifier?: string;
    /** `task`: the same tool and arguments no longer ask for the rest of the task. */
    scope?: ApprovalScope;
  };
  task_completed: { result: string; usage: TokenUsage };
  task_failed: { reason: string };
  task_cancelled: { reason: string };
}

export type TeamEventType = keyof TeamEventPayloads;
export const TEAM_EVENT_TYPES = [
  'task_queued',
  'worker_started',
  'worker_phase',
  'worker_tool_call',
  'worker_completed',
  'worker_failed',
  'worker_exited',
  'worker_approval_requested',
  'worker_approval_resolved',
  'task_completed',
  'task_failed',
  'task_cancelled',
] as const satisfies readonly TeamEventType[];

/** An event as appended (before the log assigns seq and timestamp). */
export type TeamEventInput = {
  [K in TeamEventType]: { event_type: K; worker_id: string | null; attempt: number; payload: TeamEventPayloads[K] };
}[TeamEventType];

/** An event as read back from the log: the HTTP polling / SSE shape. */
export type TeamEvent = TeamEventInput & { seq: number; timestamp: string };

/** The event after which a task's streams end. */
export function isTerminalTeamEvent(eventType: string): boolean {
  return eventType === 'task_completed' || eventType === 'task_failed' || eventType === 'task_cancelled';
}

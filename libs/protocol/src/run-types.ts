// The runs contract (WindieOS "Runs / VM Control"): field names as on the wire, shared by the gateway, the store
// and the vm-agent.

export const RUN_STATUSES = ['awaiting_worker', 'queued', 'running', 'paused', 'stopped', 'completed', 'failed'] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
export const TERMINAL_RUN_STATUSES: readonly RunStatus[] = ['stopped', 'completed', 'failed'];

export const CONTROL_MODES = ['agent_only', 'shared_control', 'human_override'] as const;
export type ControlMode = (typeof CONTROL_MODES)[number];

export const CONTROL_ACTIONS = ['pause', 'resume', 'stop', 'set-control-mode'] as const;
export type ControlAction = (typeof CONTROL_ACTIONS)[number];

/** A file of a run; unset names are null, as in the original. */
export interface RunFile {
  artifact_id: string;
  filename: string | null;
  content_type: string | null;
}

export interface NewRun {
  workspace_id: string;
  agent_id: string | null;
  query: string;
  requested_by: string | null;
  files: RunFile[];
  metadata: Record<string, unknown>;
}

/** The worker a run is bound to, as of its latest heartbeat (the original's `run.worker`). */
export interface RunWorker {
  worker_id: string;
  vm_id: string | null;
  session_id: string | null;
  agent_id: string | null;
  user_id: string | null;
  status: string;
  metadata: Record<string, unknown>;
  last_heartbeat_at: string;
}

/** The run view: the original's fields (unset ones null), then Cadre's additions. */
export interface RunRecord extends NewRun {
  run_id: string;
  conversation_ref: string;
  /** The dispatched query's message id (the worker's `turn_ref`). */
  query_message_id: string | null;
  status: RunStatus;
  control_mode: ControlMode;
  worker: RunWorker | null;
  created_at: string;
  updated_at: string;
  last_heartbeat_at: string | null;
  last_event_seq: number;
  // Cadre's additions.
  /** Times the run's worker was lost (lease expired). */
  attempts: number;
  assigned_at: string | null;
  dispatched_at: string | null;
  finished_at: string | null;
  /** Why a failed run failed. */
  error: string | null;
}

export interface RunEvent {
  seq: number;
  timestamp: string;
  event_type: string;
  source: string;
  payload: unknown;
}

export interface HeartbeatInput {
  workspace_id: string;
  worker_id: string;
  vm_id?: string | null;
  user_id?: string | null;
  session_id?: string | null;
  agent_id?: string | null;
  status: string;
  metadata: Record<string, unknown>;
}

export interface VmWorker {
  worker_id: string;
  workspace_id: string;
  vm_id: string | null;
  user_id: string | null;
  session_id: string | null;
  agent_id: string | null;
  status: string;
  metadata: Record<string, unknown>;
  last_heartbeat_at: string;
  /** Cadre's addition: the run this worker holds. */
  current_run_id: string | null;
}

/** What a heartbeat hands the worker to execute; `lease_id` is Cadre's fencing token for the assignment. */
export interface AssignedRun {
  run_id: string;
  workspace_id: string;
  agent_id: string | null;
  conversation_ref: string;
  query: string;
  requested_by: string | null;
  files: RunFile[];
  metadata: Record<string, unknown>;
  control_mode: ControlMode;
  lease_id: string;
}

/** A command for the run's worker; as the original, it carries the run's control mode after the action. */
export interface ControlCommand {
  command_id: string;
  run_id: string;
  action: ControlAction;
  control_mode: ControlMode;
  requested_by: string | null;
  created_at: string;
}

/** A relayed event: `streaming-complete` completes the run, `error` fails it. */
export interface RelayedEvent {
  event_type: string;
  source?: string;
  payload?: unknown;
}

// Request bodies as a client sends them (the gateway validates them against its JSON schemas first).

export interface CreateRunBody {
  workspace_id: string;
  agent_id?: string | null;
  query: string;
  requested_by?: string | null;
  files?: { artifact_id: string; filename?: string | null; content_type?: string | null }[];
  metadata?: Record<string, unknown>;
}

/** A heartbeat as sent: metadata optional, plus Cadre's acknowledgements. */
export type HeartbeatBody = Omit<HeartbeatInput, 'metadata'> & { metadata?: Record<string, unknown>; acked_command_ids?: string[] };

export interface DispatchedBody {
  worker_id: string;
  user_id?: string;
  turn_ref?: string;
  conversation_ref?: string | null;
  lease_id?: string;
}

export interface RelayBody {
  event_type?: string;
  source?: string;
  payload?: unknown;
  events?: { event_type: string; source?: string; payload?: unknown }[];
  worker_id?: string;
  lease_id?: string;
  batch_id?: string;
}

// Approvals of a VM run's tool calls (Cadre's addition): the vm-agent proposes a turn's calls, then polls each `ask`.

/** A tool call a VM agent is about to run, as it asks about it. */
export interface ProposedCall {
  call_id: string;
  tool_name: string;
  arguments: string;
  /**
   * The tool's parameter schema (JSON Schema of its arguments), so an approver may amend them (a modifier is
   * checked against it). Agents that do not send it get approvals without modifiers.
   */
  parameters_schema?: Record<string, unknown>;
}

/** What the policy says about one call: run it, refuse it (the model gets the reason), or wait for `approval_id`. */
export type CallVerdict =
  | { call_id: string; action: 'allow' }
  | { call_id: string; action: 'deny'; reason: string }
  | { call_id: string; action: 'ask'; approval_id: string; reason: string; timeout_secs: number; expires_at: number };

/** An approval as the vm-agent polls it. */
export interface RunApproval {
  approval_id: string;
  status: 'pending' | 'approved' | 'denied' | 'expired' | 'cancelled';
  decision_reason?: string;
  expires_at: number;
  /** The amended arguments (JSON text) an approver let the call run with instead of the proposed ones. */
  modifier?: string;
}

// The runs contract (WindieOS "Runs / VM Control"): field names as on the wire.

export const RUN_STATUSES = ['awaiting_worker', 'queued', 'running', 'paused', 'stopped', 'completed', 'failed'] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
export const TERMINAL_RUN_STATUSES: readonly RunStatus[] = ['stopped', 'completed', 'failed'];

export const CONTROL_MODES = ['agent_only', 'shared_control', 'human_override'] as const;
export type ControlMode = (typeof CONTROL_MODES)[number];

export const CONTROL_ACTIONS = ['pause', 'resume', 'stop', 'set-control-mode'] as const;
export type ControlAction = (typeof CONTROL_ACTIONS)[number];

export interface RunFile {
  artifact_id: string;
  filename: string;
  content_type: string;
}

export interface NewRun {
  workspace_id: string;
  agent_id: string;
  query: string;
  requested_by: string;
  files: RunFile[];
  metadata: Record<string, unknown>;
}

export interface RunRecord extends NewRun {
  run_id: string;
  status: RunStatus;
  control_mode: ControlMode;
  conversation_ref: string;
  worker_id: string | null;
  vm_id: string | null;
  user_id: string | null;
  session_id: string | null;
  turn_ref: string | null;
  /** Times the run's worker was lost (lease expired). */
  attempts: number;
  created_at: string;
  updated_at: string;
  assigned_at: string | null;
  dispatched_at: string | null;
  finished_at: string | null;
  error: string | null;
  last_seq: number;
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
  vm_id?: string;
  user_id?: string;
  session_id?: string;
  status: string;
  metadata: Record<string, unknown>;
}

export interface VmWorker {
  worker_id: string;
  workspace_id: string;
  vm_id: string | null;
  user_id: string | null;
  session_id: string | null;
  status: string;
  metadata: Record<string, unknown>;
  last_heartbeat_at: string;
  current_run_id: string | null;
}

/** What a heartbeat hands the worker to execute; `lease_id` is Cadre's fencing token for the assignment. */
export interface AssignedRun {
  run_id: string;
  workspace_id: string;
  agent_id: string;
  conversation_ref: string;
  query: string;
  files: RunFile[];
  metadata: Record<string, unknown>;
  control_mode: ControlMode;
  lease_id: string;
}

export interface ControlCommand {
  command_id: string;
  run_id: string;
  action: ControlAction;
  control_mode?: ControlMode;
  requested_by: string;
  created_at: string;
}

/** A relayed event: `streaming-complete` completes the run, `error` fails it. */
export interface RelayedEvent {
  event_type: string;
  source?: string;
  payload?: unknown;
}

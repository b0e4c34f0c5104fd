import type { TaskStatus, TokenUsage, WorkerStatus } from '@cadre/protocol';
import type { ApprovalPolicy } from './approval-policy.ts';

export interface WorkerSpec {
  role: string;
  instructions: string;
  model?: string;
  tools: string[];
  /**
   * This worker's own rules (checked before the task's; see approval-policy.ts) as JSON text: the roster entry is
   * re-encoded by Lua's cjson, which would turn an empty list in a rule (`equals: []`) into `{}`.
   */
  approval_rules?: string;
}

export interface TeamSpec {
  lead: { instructions: string; model?: string };
  workers: WorkerSpec[];
  max_workers: number;
  /** Rules checked before the workspace's (first match wins); see approval-store.ts. */
  approval_policy?: ApprovalPolicy;
}

/** `named`: the request names the workers; `planned`: the lead spawns them with spawn_worker. */
export type TeamMode = 'named' | 'planned';

export interface NewTask {
  workspace_id: string;
  goal: string;
  team: TeamSpec;
  metadata: Record<string, unknown>;
}

/** One roster entry as stored; `lease` is internal (the BullMQ lock token of the attempt holding it). */
export interface WorkerRecord extends WorkerSpec {
  worker_id: string;
  status: WorkerStatus | 'waiting';
  attempt: number;
  lease?: string;
  host_id?: string;
  result?: string;
  usage?: TokenUsage;
  failure_reason?: string;
  /** The attempt whose first worker_phase its claim appended: a replayed claim reports that phase again. */
  phase_attempt?: number;
}

/** A worker as users see it (GET /api/tasks/:id, no lease, no instructions). */
export interface WorkerView {
  worker_id: string;
  role: string;
  status: WorkerStatus;
  attempt: number;
  host_id: string | null;
  result: string | null;
  failure_reason: string | null;
  usage: TokenUsage | null;
}

export interface TaskRecord {
  task_id: string;
  workspace_id: string;
  goal: string;
  status: TaskStatus;
  mode: TeamMode;
  team: TeamSpec;
  metadata: Record<string, unknown>;
  created_at: string;
  updated_at: string;
  started_at: string | null;
  finished_at: string | null;
  result: string | null;
  failure_reason: string | null;
  usage: TokenUsage | null;
  last_seq: number;
  workers: WorkerView[];
}

export const LEAD_WORKER_ID = 'lead';

/** What an agent job needs of its task, handed back by the claim (no further reads). */
export interface TaskContext {
  task_id: string;
  workspace_id: string;
  goal: string;
  mode: TeamMode;
  team: TeamSpec;
}

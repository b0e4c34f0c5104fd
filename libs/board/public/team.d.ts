// Types of team.js for its TypeScript readers (the `cadre` CLI); the browser loads team.js as it is.

/** One agent of the tree. `status` is one of pending, running, waiting on a tool, waiting on an approval, completed, failed. */
export interface Agent {
  id: string;
  role: string;
  status: string;
  phase: string | null;
  turn: number | null;
  mode: string | null;
  /** `tool(arguments)` of its last tool call or approval request */
  lastTool: string | null;
  tokens: number | null;
  /** ms since the epoch, from event timestamps */
  startedAt: number | null;
  endedAt: number | null;
  lastEventAt: number | null;
  attempt: number;
  failure: string | null;
  /** approval ids this agent waits on */
  awaiting: string[];
}

export type Ending = 'completed' | 'failed' | 'cancelled';

export interface Team {
  agents: Map<string, Agent>;
  /** agent ids in arrival order */
  order: string[];
  /** the task as GET /api/tasks/:id last answered */
  task: TaskSnapshot | null;
  ended: Ending | null;
  result: string | null;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | null;
  reason: string | null;
}

/** The fields of a task (GET /api/tasks/:id) the fold reads; the rest pass through. */
export interface TaskSnapshot {
  task_id: string;
  goal: string;
  status: string;
  created_at: string;
  workers?: { worker_id: string; role: string; status: string; attempt?: number; usage?: { total_tokens: number } | null; failure_reason?: string | null }[];
  result?: string | null;
  usage?: Team['usage'];
  failure_reason?: string | null;
  [field: string]: unknown;
}

/** An event as SSE and polling serve it. */
export interface TeamEventLike {
  seq: number;
  timestamp: string;
  event_type: string;
  worker_id?: string | null;
  attempt?: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  payload?: any;
}

export const STALLED_AFTER_MS: number;
export function isTerminal(type: string): boolean;
export function emptyTeam(): Team;
export function applyRoster(team: Team, task: TaskSnapshot): void;
export function applyEvent(team: Team, e: TeamEventLike): void;
export function shownStatus(a: Agent, now: number, taskEnded: boolean): string;
export function tree(team: Team): { lead: Agent | null; workers: Agent[] };
export function describe(e: TeamEventLike): string;
export function duration(ms: number): string;
export function clip(s: unknown, n: number): string;

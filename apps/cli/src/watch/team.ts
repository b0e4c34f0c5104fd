import type { Json } from '../client.ts';

/** One agent as `task watch` draws it, folded from the roster and the event log. */
export interface AgentLine {
  id: string;
  role: string;
  status: string;
  phase: string | null;
  turn: number | null;
  lastTool: string | null;
  tokens: number | null;
  startedAt: number | null;
  endedAt: number | null;
}

export interface TeamState {
  agents: Map<string, AgentLine>;
  ended: 'completed' | 'failed' | 'cancelled' | null;
  result: string | null;
  usage: { total_tokens: number; prompt_tokens: number; completion_tokens: number } | null;
  reason: string | null;
}

export const isTerminal = (type: string): boolean => type === 'task_completed' || type === 'task_failed' || type === 'task_cancelled';

export function newTeam(task: Json): TeamState {
  const team: TeamState = { agents: new Map(), ended: null, result: null, usage: null, reason: null };
  for (const w of task.workers ?? []) agentOf(team, w.worker_id, w.role).status = w.status;
  return team;
}

function agentOf(team: TeamState, id: string, role?: string): AgentLine {
  let a = team.agents.get(id);
  if (!a) {
    a = { id, role: role ?? id, status: 'pending', phase: null, turn: null, lastTool: null, tokens: null, startedAt: null, endedAt: null };
    team.agents.set(id, a);
  }
  if (role) a.role = role;
  return a;
}

export function applyEvent(team: TeamState, e: Json): void {
  const p = e.payload ?? {};
  const at = Date.parse(e.timestamp);
  if (e.event_type === 'task_completed') Object.assign(team, { ended: 'completed', result: p.result ?? null, usage: p.usage ?? null });
  else if (e.event_type === 'task_failed') Object.assign(team, { ended: 'failed', reason: p.reason ?? null });
  else if (e.event_type === 'task_cancelled') Object.assign(team, { ended: 'cancelled', reason: p.reason ?? null });
  if (!e.worker_id) return;
  const a = agentOf(team, e.worker_id, p.role);
  switch (e.event_type) {
    case 'worker_started':
      Object.assign(a, { status: 'running', startedAt: at, endedAt: null });
      break;
    case 'worker_phase':
      Object.assign(a, { status: 'running', phase: p.phase, turn: p.turn });
      break;
    case 'worker_tool_call':
      Object.assign(a, { status: 'waiting on a tool', lastTool: `${p.tool}(${clip(p.arguments ?? '', 40)})` });
      break;
    case 'worker_completed':
      Object.assign(a, { status: 'completed', endedAt: at, tokens: p.usage?.total_tokens ?? null });
      break;
    case 'worker_failed':
      Object.assign(a, { status: `failed (${p.reason})`, endedAt: at });
      break;
  }
}

/** One plain line per event, for pipes and logs. */
export function eventLine(e: Json): string {
  const p = e.payload ?? {};
  const who = e.worker_id ?? 'task';
  const what = (() => {
    switch (e.event_type) {
      case 'task_queued': return `queued: ${clip(p.goal ?? '', 80)}`;
      case 'worker_started': return `started as ${p.role} on ${p.host_id}`;
      case 'worker_phase': return `${p.phase} (turn ${p.turn})`;
      case 'worker_tool_call': return `calls ${p.tool}(${clip(p.arguments ?? '', 80)})`;
      case 'worker_completed': return `completed (${p.usage?.total_tokens ?? 0} tokens): ${clip(p.result ?? '', 80)}`;
      case 'worker_failed': return `failed: ${p.reason}${p.message ? ` — ${clip(p.message, 80)}` : ''}`;
      case 'worker_exited': return 'exited';
      case 'task_completed': return `task completed (${p.usage?.total_tokens ?? 0} tokens)`;
      case 'task_failed': return `task failed: ${p.reason}`;
      case 'task_cancelled': return `task cancelled: ${p.reason}`;
      default: return clip(JSON.stringify(p), 100);
    }
  })();
  return `#${e.seq} ${e.timestamp} ${who} ${e.event_type} ${what}`;
}

export function clip(s: string, n: number): string {
  const text = String(s).replace(/\s+/g, ' ');
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

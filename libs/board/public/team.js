// The team of a task as every Cadre UI shows it, folded from the roster (GET /api/tasks/:id) and the event log.
// One model for the board (loaded by the browser as it is, no build step) and the `cadre` CLI (imported through
// @cadre/board, types in team.d.ts): plain functions over plain objects, no DOM and no Node APIs, so the same fold
// serves a fresh load, a resumed stream, a reload and a terminal.

/** A running agent silent for this long is shown as "stalled". */
export const STALLED_AFTER_MS = 30_000;

/** What the roster's worker status means in the tree (`waiting`: parked on an approval, holding no slot). */
const ROSTER_STATUS = { pending: 'pending', running: 'running', waiting: 'waiting on an approval', completed: 'completed', failed: 'failed' };

export const isTerminal = (type) => type === 'task_completed' || type === 'task_failed' || type === 'task_cancelled';

export function emptyTeam() {
  return { agents: new Map(), order: [], task: null, ended: null, result: null, usage: null, reason: null };
}

function agent(team, id, role) {
  let a = team.agents.get(id);
  if (!a) {
    a = {
      id, role: role ?? id, status: 'pending', phase: null, turn: null, mode: null, lastTool: null, tokens: null,
      startedAt: null, endedAt: null, lastEventAt: null, attempt: 0, failure: null, awaiting: [],
    };
    team.agents.set(id, a);
    team.order.push(id);
  }
  if (role) a.role = role;
  return a;
}

/**
 * The roster as the API returns it (the lead first, then workers by number). It settles an agent's ending and
 * the status of one the events have not reached yet; the events drive everything in between.
 */
export function applyRoster(team, task) {
  team.task = task;
  for (const w of task.workers ?? []) {
    const a = agent(team, w.worker_id, w.role);
    a.attempt = w.attempt ?? a.attempt;
    const status = ROSTER_STATUS[w.status] ?? w.status;
    if (a.status === 'pending' || status === 'completed' || status === 'failed') a.status = status;
    if (w.usage) a.tokens = w.usage.total_tokens;
    if (w.failure_reason) a.failure = w.failure_reason;
  }
  if (task.status === 'completed' || task.status === 'failed' || task.status === 'cancelled') {
    team.ended ??= task.status;
    team.reason ??= task.failure_reason ?? null;
  }
  if (task.result) team.result = task.result;
  if (task.usage) team.usage = task.usage;
}

export function applyEvent(team, e) {
  const at = Date.parse(e.timestamp);
  const p = e.payload ?? {};
  switch (e.event_type) {
    case 'task_completed':
      return void Object.assign(team, { ended: 'completed', result: p.result ?? null, usage: p.usage ?? null });
    case 'task_failed':
    case 'task_cancelled':
      return void Object.assign(team, { ended: e.event_type.slice('task_'.length), reason: p.reason ?? null });
  }
  if (!e.worker_id) return;
  const a = agent(team, e.worker_id, p.role);
  a.lastEventAt = at;
  a.attempt = e.attempt ?? a.attempt;
  switch (e.event_type) {
    case 'worker_started':
      Object.assign(a, { status: 'running', startedAt: at, endedAt: null, failure: null, awaiting: [] });
      break;
    case 'worker_phase':
      Object.assign(a, { status: 'running', phase: p.phase, turn: p.turn, mode: p.mode });
      break;
    case 'worker_tool_call':
      Object.assign(a, { status: 'waiting on a tool', lastTool: `${p.tool}(${clip(p.arguments ?? '', 60)})` });
      break;
    case 'worker_approval_requested':
      a.awaiting = [...a.awaiting.filter((id) => id !== p.approval_id), p.approval_id];
      Object.assign(a, { status: 'waiting on an approval', lastTool: `${p.tool_name}(${clip(p.arguments ?? '', 60)})` });
      break;
    case 'worker_approval_resolved':
      // The worker goes on once every call of its turn is decided.
      a.awaiting = a.awaiting.filter((id) => id !== p.approval_id);
      if (a.awaiting.length === 0 && a.status === 'waiting on an approval') a.status = 'running';
      break;
    case 'worker_completed':
      Object.assign(a, { status: 'completed', endedAt: at, tokens: p.usage?.total_tokens ?? a.tokens });
      break;
    case 'worker_failed':
      Object.assign(a, { status: 'failed', endedAt: at, failure: p.reason ?? null });
      break;
    case 'worker_exited':
      a.endedAt ??= at;
      break;
  }
}

/**
 * What to show for an agent now: a running agent silent for long is "stalled" (one waiting on an approval is
 * parked, not stalled); one that never started before the task ended is "not started".
 */
export function shownStatus(a, now, taskEnded) {
  if (!taskEnded && (a.status === 'running' || a.status === 'waiting on a tool') && a.lastEventAt && now - a.lastEventAt > STALLED_AFTER_MS) return 'stalled';
  if (taskEnded && a.status === 'pending') return 'not started';
  return a.status;
}

/** The lead and the workers under it (every worker is the lead's child: named or spawned), in arrival order. */
export function tree(team) {
  const lead = team.agents.get('lead') ?? null;
  const workers = team.order.filter((id) => id !== 'lead').map((id) => team.agents.get(id));
  return { lead, workers };
}

/** What an event says, in a few words (the board's log line, the CLI's piped line). */
export function describe(e) {
  const p = e.payload ?? {};
  switch (e.event_type) {
    case 'task_queued': return `queued: ${clip(p.goal ?? '', 80)}`;
    case 'worker_started': return `started as ${p.role} on ${p.host_id}`;
    case 'worker_phase': return `${p.phase} (turn ${p.turn})`;
    case 'worker_tool_call': return `calls ${p.tool}(${clip(p.arguments ?? '', 80)})`;
    case 'worker_approval_requested': return `asks to run ${p.tool_name}(${clip(p.arguments ?? '', 60)})${p.reason ? `: ${clip(p.reason, 60)}` : ''}`;
    case 'worker_approval_resolved': return `${p.status}${p.decided_by ? ` by ${p.decided_by}` : ''}${p.reason ? `: ${clip(p.reason, 60)}` : ''}`;
    case 'worker_completed': return `completed (${p.usage?.total_tokens ?? 0} tokens): ${clip(p.result ?? '', 80)}`;
    case 'worker_failed': return `failed: ${p.reason}${p.message ? ` — ${clip(p.message, 80)}` : ''}`;
    case 'worker_exited': return 'exited';
    case 'task_completed': return `task completed (${p.usage?.total_tokens ?? 0} tokens)`;
    case 'task_failed': return `task failed: ${p.reason}`;
    case 'task_cancelled': return `task cancelled: ${p.reason}`;
    default: return clip(JSON.stringify(p), 100);
  }
}

/** "3s", "4m 05s", "2h 10m" */
export function duration(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** One line of at most n characters (runs of whitespace become one space). */
export function clip(s, n) {
  const text = String(s).replace(/\s+/g, ' ');
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

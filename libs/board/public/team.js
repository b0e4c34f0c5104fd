// The team as the task view draws it, folded from the roster (GET /api/tasks/:id) and the event log. Pure
// functions over plain objects, so the same fold serves a fresh load, a resumed stream and a reload.

const STALLED_AFTER_MS = 30_000;

export function emptyTeam() {
  return { agents: new Map(), order: [], task: null, result: null, usage: null, ended: null };
}

function agent(team, id, role) {
  let a = team.agents.get(id);
  if (!a) {
    a = { id, role: role ?? id, status: 'pending', phase: null, turn: null, mode: null, lastTool: null, tokens: null, startedAt: null, endedAt: null, lastEventAt: null, attempt: 0, failure: null };
    team.agents.set(id, a);
    team.order.push(id);
  }
  if (role) a.role = role;
  return a;
}

/** The roster as the API returns it: the lead first, then workers by number. */
export function applyRoster(team, task) {
  team.task = task;
  for (const w of task.workers ?? []) {
    const a = agent(team, w.worker_id, w.role);
    a.attempt = w.attempt;
    if (a.status === 'pending' || w.status === 'completed' || w.status === 'failed') a.status = w.status;
    if (w.usage) a.tokens = w.usage.total_tokens;
    if (w.failure_reason) a.failure = w.failure_reason;
  }
  if (task.result) team.result = task.result;
  if (task.usage) team.usage = task.usage;
}

export function applyEvent(team, e) {
  const at = Date.parse(e.timestamp);
  const p = e.payload ?? {};
  if (e.event_type.startsWith('task_')) {
    if (e.event_type === 'task_completed') Object.assign(team, { result: p.result, usage: p.usage, ended: 'completed' });
    if (e.event_type === 'task_failed') team.ended = 'failed';
    if (e.event_type === 'task_cancelled') team.ended = 'cancelled';
    return;
  }
  if (!e.worker_id) return;
  const a = agent(team, e.worker_id, p.role);
  a.lastEventAt = at;
  a.attempt = e.attempt ?? a.attempt;
  switch (e.event_type) {
    case 'worker_started':
      Object.assign(a, { status: 'running', startedAt: at, endedAt: null, failure: null });
      break;
    case 'worker_phase':
      Object.assign(a, { status: 'running', phase: p.phase, turn: p.turn, mode: p.mode });
      break;
    case 'worker_tool_call':
      Object.assign(a, { status: 'waiting on a tool', lastTool: `${p.tool}(${truncate(p.arguments ?? '', 60)})` });
      break;
    case 'worker_completed':
      Object.assign(a, { status: 'completed', endedAt: at, tokens: p.usage?.total_tokens ?? a.tokens });
      break;
    case 'worker_failed':
      Object.assign(a, { status: 'failed', endedAt: at, failure: p.reason });
      break;
    case 'worker_exited':
      a.endedAt ??= at;
      break;
    default:
      // Events this board predates (approvals, parking) still show in the log; these two also in the tree.
      if (e.event_type.includes('approval_requested')) a.status = 'waiting on an approval';
      else if (e.event_type.includes('approval_resolved')) a.status = 'running';
      else if (e.event_type.includes('parked')) a.status = 'parked';
  }
}

/** What to show for an agent now: a running agent silent for long is "stalled". */
export function shownStatus(a, now, taskEnded) {
  if (!taskEnded && (a.status === 'running' || a.status === 'waiting on a tool') && a.lastEventAt && now - a.lastEventAt > STALLED_AFTER_MS) return 'stalled';
  if (taskEnded && a.status === 'pending') return 'not started';
  return a.status;
}

/** The lead and the workers under it (every worker is the lead's child: named or spawned). */
export function tree(team) {
  const lead = team.agents.get('lead');
  const workers = team.order.filter((id) => id !== 'lead').map((id) => team.agents.get(id));
  return { lead, workers };
}

/** One line of the event log. */
export function describe(e) {
  const p = e.payload ?? {};
  switch (e.event_type) {
    case 'task_queued': return `queued: ${truncate(p.goal ?? '', 80)}`;
    case 'worker_started': return `started as ${p.role} on ${p.host_id}`;
    case 'worker_phase': return `${p.phase} (turn ${p.turn})`;
    case 'worker_tool_call': return `calls ${p.tool}(${truncate(p.arguments ?? '', 80)})`;
    case 'worker_completed': return `completed: ${truncate(p.result ?? '', 80)}`;
    case 'worker_failed': return `failed: ${p.reason}${p.message ? ` — ${truncate(p.message, 80)}` : ''}`;
    case 'worker_exited': return 'exited';
    case 'task_completed': return `task completed (${p.usage?.total_tokens ?? 0} tokens)`;
    case 'task_failed': return `task failed: ${p.reason}`;
    case 'task_cancelled': return `task cancelled: ${p.reason}`;
    default: return truncate(JSON.stringify(p), 100);
  }
}

export const isTerminal = (type) => type === 'task_completed' || type === 'task_failed' || type === 'task_cancelled';

function truncate(s, n) {
  const text = String(s);
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

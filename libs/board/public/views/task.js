import { fill, h, duration, orDash, say } from '../dom.js';
import { taskHeaders, tasksApi } from '../api.js';
import { followStream } from '../event-stream.js';
import { applyEvent, applyRoster, clip, describe, emptyTeam, isTerminal, shownStatus, tree } from '../team.js';

const KEPT_EVENTS = 2000;
const logKey = (taskId) => `cadre.log.${taskId}`;

/**
 * One task: the team tree, the event log streaming beside it, results and usage at the end, cancel. The events
 * received so far are kept in this tab's session storage, so a reload redraws them and resumes the stream after
 * the last seq (no event shown twice, none skipped).
 */
export function taskView(root, taskId) {
  const team = emptyTeam();
  const stored = JSON.parse(sessionStorage.getItem(logKey(taskId)) ?? '{"events":[]}');
  let events = stored.events;
  let stream = null;
  let ticker = null;
  let rosterTimer = null;

  const title = h('h1', { id: 'task-title' }, 'Task');
  const statusBadge = h('span', { class: 'badge' });
  const streamState = h('span', { class: 'muted', 'data-testid': 'stream-state' }, 'connecting…');
  const elapsed = h('span', { class: 'muted' });
  const cancel = h('button', { type: 'button', class: 'danger', 'aria-label': 'Cancel task' }, 'Cancel task');
  const treeBox = h('div', { class: 'tree', 'aria-label': 'Team', role: 'tree' });
  const log = h('ol', { class: 'log', 'aria-label': 'Event log', 'aria-live': 'off' });
  const outcome = h('section', { class: 'card outcome', hidden: true, 'aria-labelledby': 'outcome-title' });

  root.append(
    h('p', {}, h('a', { href: '#/tasks' }, '← Tasks')),
    h('header', { class: 'task-head' }, title, statusBadge, elapsed, streamState, h('span', { class: 'spacer' }), cancel),
    h('div', { class: 'split' },
      h('section', { 'aria-labelledby': 'team-title' }, h('h2', { id: 'team-title' }, 'Team'), treeBox),
      h('section', { 'aria-labelledby': 'log-title' }, h('h2', { id: 'log-title' }, 'Event log'), log)),
    outcome,
  );

  const drawHead = () => {
    const t = team.task;
    if (!t) return;
    title.textContent = clip(t.goal, 120);
    const status = team.ended ?? t.status;
    statusBadge.className = `badge ${status}`;
    statusBadge.textContent = status;
    statusBadge.setAttribute('data-testid', 'task-status');
    const start = Date.parse(t.created_at);
    const end = t.finished_at ? Date.parse(t.finished_at) : team.ended ? lastEventTime() : Date.now();
    elapsed.textContent = `elapsed ${duration(end - start)}`;
    cancel.disabled = Boolean(team.ended) || ['completed', 'failed', 'cancelled'].includes(t.status);
  };
  const lastEventTime = () => (events.length ? Date.parse(events.at(-1).timestamp) : Date.now());

  const agentNode = (a, children) => {
    const now = Date.now();
    const status = shownStatus(a, now, Boolean(team.ended));
    const took = a.startedAt ? duration((a.endedAt ?? (team.ended ? lastEventTime() : now)) - a.startedAt) : '—';
    return h('li', { role: 'treeitem', 'aria-expanded': children ? 'true' : undefined, 'data-agent-id': a.id, 'data-status': status, 'aria-label': `${a.role} ${a.id}: ${status}` },
      h('div', { class: 'agent' },
        h('span', { class: 'agent-name' }, a.role === a.id ? a.id : `${a.role}`, h('small', {}, ` ${a.id}`)),
        h('span', { class: `badge ${status.replaceAll(' ', '-')}` }, status),
        h('span', { class: 'fact' }, 'phase ', h('b', {}, orDash(a.phase)), a.turn ? ` · turn ${a.turn}` : ''),
        h('span', { class: 'fact tool', title: a.lastTool ?? '' }, 'tool ', h('b', {}, orDash(a.lastTool))),
        h('span', { class: 'fact' }, 'tokens ', h('b', {}, orDash(a.tokens))),
        h('span', { class: 'fact' }, took),
        a.failure ? h('span', { class: 'fact error' }, a.failure) : null),
      children ? h('ul', { role: 'group' }, children) : null);
  };

  const drawTree = () => {
    const { lead, workers } = tree(team);
    if (!lead) return void treeBox.replaceChildren(h('p', { class: 'muted' }, 'Waiting for the team…'));
    treeBox.replaceChildren(h('ul', {}, agentNode(lead, workers.map((w) => agentNode(w, null)))));
  };

  const drawOutcome = () => {
    if (!team.ended) return;
    outcome.hidden = false;
    const usage = team.usage;
    fill(outcome,
      h('h2', { id: 'outcome-title' }, `Result (${team.ended})`),
      team.result ? h('pre', { class: 'result' }, team.result) : h('p', {}, orDash(team.reason)),
      usage ? h('p', {}, `Usage: ${usage.total_tokens} tokens (${usage.prompt_tokens} prompt, ${usage.completion_tokens} completion)`) : null,
    );
  };

  const logRow = (e) =>
    h('li', { 'data-seq': e.seq, 'data-type': e.event_type },
      h('span', { class: 'seq' }, `#${e.seq}`),
      h('time', { datetime: e.timestamp }, new Date(e.timestamp).toLocaleTimeString()),
      h('span', { class: 'who' }, e.worker_id ?? 'task'),
      h('span', { class: 'what' }, describe(e)));

  const draw = () => {
    drawHead();
    drawTree();
    drawOutcome();
  };

  let loadError = null;
  const refreshRoster = async () => {
    try {
      applyRoster(team, await tasksApi.get(taskId));
      draw();
    } catch (err) {
      loadError = err.message;
      say(`Could not load the task: ${err.message}`);
    }
  };
  const refreshSoon = () => {
    clearTimeout(rosterTimer);
    rosterTimer = setTimeout(refreshRoster, 150);
  };

  const onEvent = (e) => {
    events.push(e);
    if (events.length > KEPT_EVENTS) events = events.slice(-KEPT_EVENTS);
    sessionStorage.setItem(logKey(taskId), JSON.stringify({ events }));
    applyEvent(team, e);
    log.append(logRow(e));
    if (log.childElementCount > KEPT_EVENTS) log.firstElementChild.remove();
    log.lastElementChild.scrollIntoView({ block: 'nearest' });
    if (e.event_type !== 'worker_phase' && e.event_type !== 'worker_tool_call') refreshSoon();
    draw();
  };

  cancel.addEventListener('click', async () => {
    cancel.disabled = true;
    try {
      applyRoster(team, await tasksApi.cancel(taskId));
      say('Task cancelled.');
      draw();
    } catch (err) {
      say(`Could not cancel: ${err.message}`);
      cancel.disabled = false;
    }
  });

  // Redraw what this tab already received, then resume after its last seq.
  for (const e of events) {
    applyEvent(team, e);
    log.append(logRow(e));
  }
  void (async () => {
    await refreshRoster();
    // A task that cannot be read (an unknown id, another workspace's) says so where "connecting…" stood, and
    // offers nothing to cancel; the toast alone goes away and left the page waiting for ever.
    if (!team.task) {
      streamState.textContent = `could not load the task: ${loadError}`;
      cancel.disabled = true;
      return;
    }
    stream = followStream({
      url: `/api/tasks/${encodeURIComponent(taskId)}/stream`,
      headers: taskHeaders,
      afterSeq: events.at(-1)?.seq ?? 0,
      onEvent,
      onState: (_kind, text) => (streamState.textContent = text),
      isTerminal,
    });
  })();
  ticker = setInterval(draw, 1000);

  return {
    close() {
      stream?.close();
      clearInterval(ticker);
      clearTimeout(rosterTimer);
    },
  };
}

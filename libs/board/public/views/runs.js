import { h, orDash, say, short, duration } from '../dom.js';
import { runsApi, tasksApi } from '../api.js';
import { keys, workspace } from '../session.js';

const POLL_MS = 1500;
const ACTIVE = new Set(['awaiting_worker', 'queued', 'running', 'paused']);
const MODES = ['agent_only', 'shared_control', 'human_override'];

/** The workspace's runs, live (polled), with per-run controls and stop-all behind a confirmation. */
export function runsView(root) {
  const ws = workspace();
  const body = h('tbody');
  const stopAllBox = h('section', { class: 'card', 'aria-labelledby': 'stop-all-title' });
  let timer = null;
  let closed = false;

  if (!keys()?.runsKey) {
    root.append(h('h1', {}, `Runs in ${ws}`), h('p', { class: 'card' }, 'The runs view needs the runs key (x-windie-runs-key): sign out and sign in with it.'));
    return { close() {} };
  }

  const act = async (run, action, controlMode) => {
    try {
      const updated = await runsApi.control(run.run_id, action, controlMode);
      say(`Run ${short(run.run_id)}: ${action}${controlMode ? ` ${controlMode}` : ''} → ${updated?.status ?? 'sent'}`);
    } catch (err) {
      say(`Run ${short(run.run_id)}: ${action} refused: ${err.message}`);
    }
    clearTimeout(timer);
    void refresh();
  };

  const row = (run) => {
    const active = ACTIVE.has(run.status);
    const label = `run ${short(run.run_id)}`;
    const mode = h('select', { 'aria-label': `Control mode of ${label}`, disabled: !active }, MODES.map((m) => h('option', { value: m, selected: m === run.control_mode }, m)));
    mode.addEventListener('change', () => act(run, 'set-control-mode', mode.value));
    return h('tr', { 'data-run-id': run.run_id, 'data-status': run.status },
      h('td', { title: run.run_id }, short(run.run_id)),
      h('td', {}, h('span', { class: `badge ${run.status}` }, run.status)),
      h('td', {}, orDash(run.agent_id)),
      h('td', { class: 'goal' }, orDash(run.query)),
      h('td', {}, orDash(run.worker?.worker_id ?? run.worker_id)),
      h('td', { class: 'num', title: run.created_at }, duration(Date.now() - Date.parse(run.created_at))),
      h('td', { class: 'actions' },
        h('button', { type: 'button', 'aria-label': `Pause ${label}`, disabled: !['awaiting_worker', 'queued', 'running'].includes(run.status), onclick: () => act(run, 'pause') }, 'Pause'),
        h('button', { type: 'button', 'aria-label': `Resume ${label}`, disabled: run.status !== 'paused', onclick: () => act(run, 'resume') }, 'Resume'),
        h('button', { type: 'button', class: 'danger', 'aria-label': `Stop ${label}`, disabled: !active, onclick: () => act(run, 'stop') }, 'Stop'),
        mode));
  };

  const refresh = async () => {
    try {
      const runs = await runsApi.list(ws);
      if (closed) return;
      body.replaceChildren(...runs.map(row));
      if (!runs.length) body.append(h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No runs in this workspace.')));
    } catch (err) {
      say(`Could not load runs: ${err.message}`);
    }
    if (!closed) timer = setTimeout(refresh, POLL_MS);
  };

  // Stop-all: first name what it will stop (the active runs and unfinished team tasks in this workspace), then
  // stop, then show what the gateway reports it stopped.
  const showStopAll = () => {
    stopAllBox.replaceChildren(
      h('h2', { id: 'stop-all-title' }, 'Stop everything'),
      h('button', { type: 'button', class: 'danger', onclick: confirmStopAll }, `Stop all in ${ws}…`));
  };
  const confirmStopAll = async () => {
    const [runs, queued, running] = await Promise.all([runsApi.list(ws), tasksApi.list(ws, { status: 'queued', limit: 200 }), tasksApi.list(ws, { status: 'running', limit: 200 })]);
    const activeRuns = runs.filter((r) => ACTIVE.has(r.status));
    const tasks = [...running.tasks, ...queued.tasks];
    stopAllBox.replaceChildren(
      h('h2', { id: 'stop-all-title' }, `Stop all in ${ws}?`),
      h('div', { role: 'alertdialog', 'aria-labelledby': 'stop-all-title', 'aria-describedby': 'stop-all-what', class: 'confirm' },
        h('p', { id: 'stop-all-what' }, `This stops ${activeRuns.length} run(s) and cancels ${tasks.length} team task(s):`),
        h('ul', { 'aria-label': 'Will stop' },
          activeRuns.map((r) => h('li', {}, `run ${short(r.run_id)} (${r.status}) ${orDash(r.query)}`)),
          tasks.map((t) => h('li', {}, `task ${short(t.task_id)} (${t.status}) ${t.goal.slice(0, 80)}`))),
        h('button', { type: 'button', class: 'danger', onclick: doStopAll }, 'Confirm stop all'),
        h('button', { type: 'button', onclick: showStopAll }, 'Keep running')));
  };
  const doStopAll = async () => {
    try {
      const result = await runsApi.stopAll(ws);
      const runIds = result.stopped_run_ids ?? [];
      const taskIds = result.stopped_task_ids ?? [];
      stopAllBox.replaceChildren(
        h('h2', { id: 'stop-all-title' }, 'Stopped'),
        h('p', { role: 'status' }, `Stopped ${runIds.length} run(s) and cancelled ${taskIds.length} task(s).`),
        h('ul', { 'aria-label': 'Stopped' },
          runIds.map((id) => h('li', {}, `run ${id}`)),
          taskIds.map((id) => h('li', {}, h('a', { href: `#/tasks/${id}` }, `task ${id}`)))),
        h('button', { type: 'button', onclick: showStopAll }, 'Done'));
    } catch (err) {
      say(`Stop-all refused: ${err.message}`);
      showStopAll();
    }
    clearTimeout(timer);
    void refresh();
  };

  showStopAll();
  root.append(
    h('h1', {}, `Runs in ${ws}`),
    h('table', { class: 'list', 'aria-label': 'Runs' },
      h('thead', {}, h('tr', {}, ['Run', 'Status', 'Agent', 'Query', 'Worker', 'Age', 'Controls'].map((c) => h('th', {}, c)))),
      body),
    stopAllBox,
  );
  void refresh();
  return { close: () => { closed = true; clearTimeout(timer); } };
}

import { h, duration, say } from '../dom.js';
import { tasksApi } from '../api.js';
import { workspace } from '../session.js';

const POLL_MS = 1500;

/** The workspace's tasks, live (polled), newest first, and the new-task form. */
export function tasksView(root) {
  const ws = workspace();
  const body = h('tbody');
  const more = h('button', { type: 'button', hidden: true }, 'Show older tasks');
  let cursor = null;
  let older = [];
  let timer = null;
  let closed = false;

  const row = (t) =>
    h('tr', { 'data-task-id': t.task_id, 'data-status': t.status },
      h('td', {}, h('span', { class: `badge ${t.status}` }, t.status)),
      h('td', {}, h('a', { href: `#/tasks/${t.task_id}` }, t.goal.length > 90 ? `${t.goal.slice(0, 89)}…` : t.goal)),
      h('td', {}, t.mode),
      h('td', { class: 'num' }, String(t.team_size)),
      h('td', { class: 'num', title: t.created_at }, duration(Date.now() - Date.parse(t.created_at))),
    );

  const refresh = async () => {
    try {
      const page = await tasksApi.list(ws, { limit: 25 });
      if (closed) return;
      const seen = new Set(page.tasks.map((t) => t.task_id));
      body.replaceChildren(...page.tasks.map(row), ...older.filter((t) => !seen.has(t.task_id)).map(row));
      if (!older.length) cursor = page.next_cursor;
      more.hidden = !cursor;
      if (!page.tasks.length && !older.length) body.append(h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'No tasks in this workspace yet.')));
    } catch (err) {
      say(`Could not load tasks: ${err.message}`);
    }
    if (!closed) timer = setTimeout(refresh, POLL_MS);
  };
  more.addEventListener('click', async () => {
    const page = await tasksApi.list(ws, { limit: 25, cursor });
    older = older.concat(page.tasks);
    cursor = page.next_cursor;
    clearTimeout(timer);
    void refresh();
  });

  root.append(
    h('section', { class: 'card', 'aria-labelledby': 'new-task-title' }, h('h2', { id: 'new-task-title' }, 'New task'), newTaskForm(ws)),
    h('section', { 'aria-labelledby': 'tasks-title' },
      h('h1', { id: 'tasks-title' }, `Tasks in ${ws}`),
      h('table', { class: 'list', 'aria-label': 'Tasks' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Status'), h('th', {}, 'Goal'), h('th', {}, 'Team'), h('th', {}, 'Size'), h('th', {}, 'Age'))),
        body),
      more),
  );
  void refresh();
  return { close: () => { closed = true; clearTimeout(timer); } };
}

function newTaskForm(ws) {
  const roles = h('input', { name: 'roles', placeholder: 'researcher, critic', autocomplete: 'off' });
  const rolesLabel = h('label', { hidden: true }, 'Worker roles (comma-separated)', roles);
  const mode = h('select', { name: 'mode' },
    h('option', { value: 'planned' }, 'Planned: the lead spawns its workers'),
    h('option', { value: 'named' }, 'Named workers'));
  mode.addEventListener('change', () => {
    rolesLabel.hidden = mode.value !== 'named';
    roles.required = mode.value === 'named';
  });
  const form = h('form', { class: 'new-task' },
    h('label', {}, 'Goal', h('textarea', { name: 'goal', required: true, rows: 2, maxlength: 20000 })),
    h('label', {}, 'Team', mode),
    rolesLabel,
    h('label', {}, 'Max workers', h('input', { name: 'max', type: 'number', min: 1, max: 16, value: 4 })),
    h('button', { type: 'submit' }, 'Create task'),
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const data = new FormData(form);
    const team = { max_workers: Number(data.get('max')) };
    if (mode.value === 'named') {
      team.workers = String(data.get('roles')).split(',').map((r) => r.trim()).filter(Boolean).map((role) => ({ role }));
    }
    try {
      const task = await tasksApi.create({ workspace_id: ws, goal: String(data.get('goal')), team });
      location.hash = `#/tasks/${task.task_id}`;
    } catch (err) {
      say(`Could not create the task: ${err.message}`);
    }
  });
  return form;
}

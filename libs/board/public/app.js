import { h, say } from './dom.js';
import { keys, setWorkspace, signIn, signOut, workspace } from './session.js';
import { tasksView } from './views/tasks.js';
import { taskView } from './views/task.js';
import { runsView } from './views/runs.js';
import { approvalsView } from './views/approvals.js';
import { sessionView, sessionsView } from './views/sessions.js';
import { ApiError, tasksApi } from './api.js';

// Hash routes keep the board one static page: #/tasks, #/tasks/<id>, #/runs, #/sessions[/<id>], #/approvals.
const main = document.getElementById('main');
let current = null;

function route() {
  current?.close?.();
  current = null;
  say('');
  main.replaceChildren();
  const signedIn = keys() !== null;
  for (const id of ['nav', 'workspace-form', 'sign-out']) document.getElementById(id).hidden = !signedIn;
  if (!signedIn) return void main.append(signInForm());
  document.getElementById('workspace').value = workspace();
  const [, view, id] = (location.hash || '#/tasks').split('/');
  for (const link of document.querySelectorAll('#nav a')) {
    link.toggleAttribute('aria-current', link.getAttribute('href') === `#/${view}`);
  }
  if (view === 'tasks' && id) current = taskView(main, decodeURIComponent(id));
  else if (view === 'runs') current = runsView(main);
  else if (view === 'sessions' && id) current = sessionView(main, decodeURIComponent(id));
  else if (view === 'sessions') current = sessionsView(main);
  else if (view === 'approvals') current = approvalsView(main);
  else current = tasksView(main);
}

function signInForm() {
  const error = h('p', { class: 'error', role: 'alert' });
  const form = h('form', { class: 'card sign-in', 'aria-labelledby': 'sign-in-title' },
    h('h1', { id: 'sign-in-title' }, 'Sign in'),
    h('p', {}, 'Keys stay in this tab (session storage) and are sent only to this gateway, in headers.'),
    h('label', {}, 'API key', h('input', { name: 'apiKey', type: 'password', required: true, autocomplete: 'off' })),
    h('label', {}, 'Runs key (for the runs view)', h('input', { name: 'runsKey', type: 'password', autocomplete: 'off' })),
    h('label', {}, 'Runs control key (for stop-all)', h('input', { name: 'controlKey', type: 'password', autocomplete: 'off' })),
    h('label', {}, 'Workspace', h('input', { name: 'workspace', value: workspace(), required: true, autocomplete: 'off' })),
    h('button', { type: 'submit' }, 'Sign in'),
    error,
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const data = new FormData(form);
    signIn(String(data.get('apiKey')).trim(), String(data.get('runsKey')).trim(), String(data.get('controlKey')).trim());
    setWorkspace(String(data.get('workspace')).trim());
    try {
      // Check the key before showing anything: one list call answers 401 for a wrong key.
      await tasksApi.list(workspace(), { limit: 1 });
      location.hash = '#/tasks';
      route();
    } catch (err) {
      signOut();
      error.textContent = err instanceof ApiError && err.status === 401 ? 'That API key was not accepted.' : `Sign-in failed: ${err.message}`;
    }
  });
  return form;
}

document.getElementById('sign-out').addEventListener('click', () => {
  signOut();
  location.hash = '';
  route();
});
// The workspace field applies on change (leaving it) and on Enter.
function applyWorkspace() {
  const input = document.getElementById('workspace');
  if (!input.checkValidity() || input.value.trim() === workspace()) return;
  setWorkspace(input.value.trim());
  if (location.hash.startsWith('#/tasks/')) location.hash = '#/tasks';
  else route();
}
document.getElementById('workspace-form').addEventListener('change', applyWorkspace);
document.getElementById('workspace-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  applyWorkspace();
});
window.addEventListener('hashchange', route);
route();

import { h, say } from '../dom.js';
import { approvalsApi } from '../api.js';
import { workspace } from '../session.js';

/**
 * The approvals inbox: the workspace's pending approvals with approve / deny each. A gateway without the
 * approvals API (GET /api/approvals answers 404) gets a notice instead.
 */
export function approvalsView(root) {
  const ws = workspace();
  const box = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  root.append(h('h1', {}, `Approvals in ${ws}`), box);
  let closed = false;
  let timer;

  const decide = async (approval, approved) => {
    try {
      await approvalsApi.decide(approval.approval_id, approved);
      say(`${approved ? 'Approved' : 'Denied'} ${approval.tool_name} for ${approval.worker_id}`);
    } catch (err) {
      say(`Could not decide: ${err.message}`);
    }
    await refresh();
  };

  const row = (a) => {
    const label = `${a.tool_name} for ${a.worker_id}`;
    return h('li', { 'data-testid': 'approval', 'data-approval-id': a.approval_id },
      h('strong', {}, a.tool_name), ` ${a.arguments} — ${a.worker_id}, task ${a.task_id.slice(0, 8)}${a.reason ? ` — ${a.reason}` : ''} `,
      h('button', { type: 'button', 'aria-label': `Approve ${label}`, onclick: () => decide(a, true) }, 'Approve'),
      h('button', { type: 'button', class: 'danger', 'aria-label': `Deny ${label}`, onclick: () => decide(a, false) }, 'Deny'));
  };

  async function refresh() {
    clearTimeout(timer);
    try {
      const page = await approvalsApi.list(ws);
      if (closed) return;
      if (page === null) {
        box.replaceChildren(h('p', { class: 'card', 'data-testid': 'approvals-unavailable' },
          'Approvals are not available on this gateway: it has no /api/approvals API.'));
        return;
      }
      const items = page.approvals ?? [];
      box.replaceChildren(items.length ? h('ul', { class: 'card' }, items.map(row)) : h('p', { class: 'card' }, 'No pending approvals.'));
    } catch (err) {
      say(`Could not load approvals: ${err.message}`);
    }
    if (!closed) timer = setTimeout(() => void refresh(), 2000);
  }
  void refresh();
  return {
    close() {
      closed = true;
      clearTimeout(timer);
    },
  };
}

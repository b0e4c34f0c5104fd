import { h, say } from '../dom.js';
import { approvalsApi } from '../api.js';
import { workspace } from '../session.js';

/**
 * The approvals inbox. Until the gateway has an approvals API (GET /api/approvals answers 404), this says so;
 * once it exists, pending approvals are listed here.
 */
export function approvalsView(root) {
  const ws = workspace();
  const box = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  root.append(h('h1', {}, `Approvals in ${ws}`), box);
  void (async () => {
    try {
      const page = await approvalsApi.list(ws);
      if (page === null) {
        box.replaceChildren(h('p', { class: 'card', 'data-testid': 'approvals-unavailable' },
          'Approvals are not available on this gateway yet: it has no /api/approvals API. Once it does, the pending inbox (approve, deny, bulk) appears here.'));
        return;
      }
      const items = page.approvals ?? [];
      box.replaceChildren(items.length
        ? h('ul', { class: 'card' }, items.map((a) => h('li', {}, `${a.approval_id ?? a.id}: ${a.tool ?? ''} ${a.status ?? ''}`)))
        : h('p', { class: 'card' }, 'No pending approvals.'));
    } catch (err) {
      say(`Could not load approvals: ${err.message}`);
    }
  })();
  return { close() {} };
}

import { h, say, short } from '../dom.js';
import { approvalsApi, taskHeaders } from '../api.js';
import { followStream } from '../event-stream.js';
import { workspace } from '../session.js';
import { clip, duration } from '../team.js';

const POLL_MS = 2000;

/**
 * The approvals inbox: the workspace's pending approvals, live, with approve / deny each and in bulk (tick several
 * or all, then approve or deny them with one optional reason). Live means the inbox's SSE stream
 * (GET /api/approvals/stream): each request or decision there refreshes the list; where the stream is refused
 * (an older gateway, or a cursor the inbox log no longer holds) the list is polled every 2 s instead. A gateway
 * without the approvals API (GET /api/approvals answers 404) gets a notice instead.
 */
export function approvalsView(root) {
  const ws = workspace();
  let closed = false;
  let timer;
  let polling = false;
  let shown = null;
  let pending = [];
  const selected = new Set();

  const box = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  const reason = h('input', { name: 'reason', maxlength: 1000, autocomplete: 'off', placeholder: 'optional; a denied model is told it' });
  const approveSelected = h('button', { type: 'button', onclick: () => decide([...selected], true) });
  const denySelected = h('button', { type: 'button', class: 'danger', onclick: () => decide([...selected], false) });
  const selectAll = h('input', { type: 'checkbox', 'aria-label': 'Select all pending approvals', onchange: () => {
    for (const a of pending) {
      if (selectAll.checked) selected.add(a.approval_id);
      else selected.delete(a.approval_id);
    }
    for (const tick of box.querySelectorAll('tbody input[type="checkbox"]')) tick.checked = selectAll.checked;
    drawToolbar();
  } });
  const toolbar = h('div', { class: 'card bulk', role: 'group', 'aria-label': 'Decide selected approvals' },
    h('label', {}, 'Reason for the decisions', reason), approveSelected, denySelected);
  const live = h('span', { class: 'muted', 'data-testid': 'inbox-state' }, 'connecting…');
  const more = h('p', { class: 'muted', hidden: true }, 'Showing the oldest 200 pending approvals; the rest appear as these are decided.');
  root.append(h('header', { class: 'task-head' }, h('h1', {}, `Approvals in ${ws}`), live), toolbar, box, more);

  /** Decides the given approvals (one or many), then says what happened and refreshes the inbox. */
  async function decide(ids, approved) {
    if (!ids.length) return;
    const verb = approved ? 'Approved' : 'Denied';
    try {
      const { decided, failed } = await approvalsApi.decideMany(ids, approved, reason.value.trim() || undefined);
      for (const id of ids) selected.delete(id);
      const what = decided.length === 1 ? `${decided[0].tool_name} for ${whose(decided[0])}` : `${decided.length} approval(s)`;
      say(`${verb} ${what}.${failed.length ? ` ${failed.length} could not be decided: ${failed.map((f) => f.message).join('; ')}` : ''}`);
    } catch (err) {
      say(`Could not decide: ${err.message}`);
    }
    await refresh();
  }

  const row = (a) => {
    const label = `${a.tool_name} for ${whose(a)}`;
    return h('tr', { 'data-testid': 'approval', 'data-approval-id': a.approval_id },
      h('td', {}, h('input', { type: 'checkbox', 'aria-label': `Select ${label}`, checked: selected.has(a.approval_id), onchange: (ev) => {
        if (ev.target.checked) selected.add(a.approval_id);
        else selected.delete(a.approval_id);
        drawToolbar();
      } })),
      h('td', {}, h('strong', {}, a.tool_name)),
      h('td', { class: 'args', title: a.arguments }, clip(a.arguments, 80)),
      h('td', {}, a.worker_id || '—'),
      h('td', {}, a.session_id
        ? h('a', { href: `#/sessions/${encodeURIComponent(a.session_id)}`, 'aria-label': `Session ${short(a.session_id)}` }, `session ${short(a.session_id)}`)
        : h('a', { href: `#/tasks/${encodeURIComponent(a.task_id)}`, 'aria-label': `Task ${short(a.task_id)}` }, short(a.task_id))),
      h('td', {}, a.reason || '—'),
      h('td', { class: 'num', 'data-expires-at': a.expires_at }, duration(a.expires_at - Date.now())),
      h('td', { class: 'actions' },
        h('button', { type: 'button', 'aria-label': `Approve ${label}`, onclick: () => decide([a.approval_id], true) }, 'Approve'),
        h('button', { type: 'button', class: 'danger', 'aria-label': `Deny ${label}`, onclick: () => decide([a.approval_id], false) }, 'Deny')));
  };

  function drawToolbar() {
    const n = selected.size;
    approveSelected.textContent = `Approve selected (${n})`;
    denySelected.textContent = `Deny selected (${n})`;
    approveSelected.setAttribute('aria-label', `Approve ${n} selected approval(s)`);
    denySelected.setAttribute('aria-label', `Deny ${n} selected approval(s)`);
    approveSelected.disabled = denySelected.disabled = n === 0;
    selectAll.checked = n > 0 && n === pending.length;
    selectAll.indeterminate = n > 0 && n < pending.length;
  }

  function draw() {
    toolbar.hidden = pending.length === 0;
    box.replaceChildren(pending.length
      ? h('table', { class: 'list', 'aria-label': 'Pending approvals' },
        h('thead', {}, h('tr', {}, h('th', {}, selectAll), ...['Tool', 'Arguments', 'Worker', 'Task or session', 'Why it asks', 'Expires in', ''].map((t) => h('th', {}, t)))),
        h('tbody', {}, pending.map(row)))
      : h('p', { class: 'card' }, 'No pending approvals.'));
    drawToolbar();
  }

  async function refresh() {
    clearTimeout(timer);
    try {
      const page = await approvalsApi.list(ws);
      if (closed) return;
      if (page === null) {
        toolbar.hidden = true;
        box.replaceChildren(h('p', { class: 'card', 'data-testid': 'approvals-unavailable' },
          'Approvals are not available on this gateway: it has no /api/approvals API.'));
        return;
      }
      pending = page.approvals ?? [];
      more.hidden = !page.next_cursor;
      const ids = new Set(pending.map((a) => a.approval_id));
      for (const id of selected) if (!ids.has(id)) selected.delete(id);
      // Redraw only when the inbox changed, so a tick or focus is not lost every refresh.
      const now = [...ids].join();
      if (now !== shown) draw();
      else for (const cell of box.querySelectorAll('[data-expires-at]')) cell.textContent = duration(Number(cell.dataset.expiresAt) - Date.now());
      shown = now;
    } catch (err) {
      say(`Could not load approvals: ${err.message}`);
    }
    if (!closed && polling) timer = setTimeout(() => void refresh(), POLL_MS);
  }
  // A burst of inbox events (a replay, a bulk decision) becomes one refresh.
  const refreshSoon = () => {
    clearTimeout(timer);
    timer = setTimeout(() => void refresh(), 100);
  };
  const stream = followStream({
    url: `/api/approvals/stream?${new URLSearchParams({ workspace_id: ws })}`,
    headers: taskHeaders,
    afterSeq: 0,
    isTerminal: () => false,
    onEvent: refreshSoon,
    onState(kind, text) {
      if (kind === 'stopped') {
        polling = true;
        live.textContent = `refreshing every ${POLL_MS / 1000} s (${text})`;
        refreshSoon();
      } else live.textContent = kind === 'live' ? 'live' : text;
    },
  });
  drawToolbar();
  toolbar.hidden = true;
  void refresh();
  return {
    close() {
      closed = true;
      stream.close();
      clearTimeout(timer);
    },
  };
}

/** Who waits on an approval: a team worker, or a session (whose approvals have no worker). */
function whose(a) {
  return a.worker_id || `session ${short(a.session_id)}`;
}

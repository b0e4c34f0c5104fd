import { h, orDash, say } from '../dom.js';
import { approvalsApi, sessionsApi, taskHeaders } from '../api.js';
import { applyAnswerEvent, emptyAnswer } from '../answer.js';
import { clip } from '../team.js';
import { describeSessionEvent, sessionEventSource } from '../session-log.js';
import { followStream } from '../event-stream.js';
import { workspace } from '../session.js';

/** The sessions API has no listing yet: start a session here, or open one by its id. */
export function sessionsView(root) {
  const ws = workspace();
  const open = h('form', { class: 'card' },
    h('h2', {}, 'Open a session'),
    h('label', {}, 'Session id', h('input', { name: 'id', required: true, autocomplete: 'off', pattern: '[0-9a-f\\-]{36}' })),
    h('button', { type: 'submit' }, 'Open session'));
  open.addEventListener('submit', (ev) => {
    ev.preventDefault();
    location.hash = `#/sessions/${String(new FormData(open).get('id')).trim()}`;
  });
  const start = h('button', { type: 'button' }, `Start a session in ${ws}`);
  start.addEventListener('click', async () => {
    try {
      const session = await sessionsApi.create({ workspace_id: ws });
      location.hash = `#/sessions/${session.session_id}`;
    } catch (err) {
      say(`Could not start a session: ${err.message}`);
    }
  });
  root.append(h('h1', {}, `Sessions in ${ws}`), h('p', { class: 'card' }, start), open);
  return { close() {} };
}

/** One session: its status, the conversation (user messages and the agent's streamed answers), send, cancel, close. */
export function sessionView(root, sessionId) {
  const status = h('span', { class: 'badge', 'data-testid': 'session-status' });
  const streamState = h('span', { class: 'muted', 'data-testid': 'stream-state' }, 'connecting…');
  const talk = h('ol', { class: 'conversation', 'aria-label': 'Conversation' });
  const log = h('ol', { class: 'log', 'aria-label': 'Event log' });
  const input = h('textarea', { name: 'content', rows: 2, required: true, 'aria-label': 'Message' });
  const send = h('form', { class: 'send' }, input, h('button', { type: 'submit' }, 'Send'));
  const cancel = h('button', { type: 'button' }, 'Cancel turn');
  const end = h('button', { type: 'button', class: 'danger' }, 'Close session');
  const asks = h('section', { class: 'card', hidden: true, 'aria-label': 'Waiting for your approval' });
  // The turn's answer as it streams, folded by answer.js: a model call that a lost or drained worker left
  // unfinished is dropped at its attempt_lost (the next attempt streams it again), so the answer shows once.
  let answer = { fold: emptyAnswer(), li: null };
  let stream = null;
  let ws = null;

  // The turn's tool calls that wait for a decision (the session's approval policy said ask), with approve / deny.
  const decide = async (a, approved) => {
    try {
      const { failed } = await approvalsApi.decideMany([a.approval_id], approved);
      say(failed.length ? `Could not decide: ${failed[0].message}` : `${approved ? 'Approved' : 'Denied'} ${a.tool_name}.`);
    } catch (err) {
      say(`Could not decide: ${err.message}`);
    }
    await drawAsks();
  };
  const drawAsks = async () => {
    const page = await approvalsApi.list(ws, { session_id: sessionId }).catch((err) => void say(`Could not load approvals: ${err.message}`));
    const pending = page?.approvals ?? [];
    asks.hidden = pending.length === 0;
    asks.replaceChildren(h('h2', {}, 'Waiting for your approval'), h('ul', {}, pending.map((a) => {
      const label = `${a.tool_name}(${clip(a.arguments, 40)})`;
      return h('li', { 'data-approval-id': a.approval_id }, h('code', {}, label), a.reason ? ` — ${a.reason} ` : ' ',
        h('button', { type: 'button', 'aria-label': `Approve ${label}`, onclick: () => decide(a, true) }, 'Approve'), ' ',
        h('button', { type: 'button', class: 'danger', 'aria-label': `Deny ${label}`, onclick: () => decide(a, false) }, 'Deny'));
    })));
  };

  const setStatus = (s) => {
    status.textContent = s;
    status.className = `badge ${String(s).replaceAll(' ', '-')}`;
  };
  const onEvent = (e) => {
    const p = e.payload ?? {};
    if (e.event_type === 'user_message') talk.append(h('li', { class: 'user' }, h('b', {}, 'user '), p.content));
    applyAnswerEvent(answer.fold, e);
    if (e.event_type === 'text_delta' && !answer.li) {
      answer.li = h('li', { class: 'agent', 'data-message-id': p.message_id }, h('b', {}, 'agent '), h('span', {}, answer.fold.text));
      talk.append(answer.li);
    } else if (e.event_type === 'text_delta') {
      answer.li.lastElementChild.append(p.content);
    }
    // Only a lost attempt takes text back (the fold drops what its model call had streamed): redraw the whole answer.
    if (answer.li && e.event_type === 'attempt_lost') answer.li.lastElementChild.textContent = answer.fold.text;
    if (e.event_type === 'user_message' || e.event_type === 'turn_complete') answer = { fold: emptyAnswer(), li: null };
    if (e.event_type === 'user_message') setStatus('running');
    if (e.event_type === 'activity') setStatus(p.state === 'idle' ? 'idle' : p.state === 'waiting_approval' ? 'waiting on an approval' : 'running');
    if (e.event_type === 'tool_request') setStatus('waiting_tool');
    if (e.event_type === 'approval_requested') setStatus('waiting on an approval');
    if (e.event_type === 'approval_requested' || e.event_type === 'approval_resolved') void drawAsks();
    if (e.event_type === 'turn_complete') setStatus('idle');
    if (e.event_type === 'session_closed') setStatus('closed');
    if (e.event_type !== 'text_delta' && e.event_type !== 'thinking_delta') {
      log.append(h('li', { 'data-seq': e.seq, 'data-type': e.event_type },
        h('span', { class: 'seq' }, `#${e.seq}`), h('time', { datetime: e.timestamp }, new Date(e.timestamp).toLocaleTimeString()),
        h('span', { class: 'who' }, sessionEventSource(e)), h('span', { class: 'what' }, describeSessionEvent(e))));
    }
  };

  send.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await sessionsApi.send(sessionId, input.value);
      input.value = '';
    } catch (err) {
      say(`Not sent: ${err.message}`);
    }
  });
  cancel.addEventListener('click', () => sessionsApi.cancel(sessionId).catch((err) => say(`Could not cancel: ${err.message}`)));
  end.addEventListener('click', () => sessionsApi.close(sessionId).catch((err) => say(`Could not close: ${err.message}`)));

  root.append(
    h('p', {}, h('a', { href: '#/sessions' }, '← Sessions')),
    h('header', { class: 'task-head' }, h('h1', {}, `Session ${sessionId.slice(0, 8)}`), status, streamState, h('span', { class: 'spacer' }), cancel, end),
    h('div', { class: 'split' },
      h('section', { 'aria-label': 'Conversation' }, talk, asks, send),
      h('section', { 'aria-label': 'Session events' }, log)));

  void (async () => {
    try {
      const session = await sessionsApi.get(sessionId);
      ws = session.workspace_id;
      setStatus(orDash(session.status));
    } catch (err) {
      // Say so where "connecting…" stood, with nothing left to press (see the task view).
      streamState.textContent = `could not load the session: ${err.message}`;
      for (const button of [cancel, end, send.querySelector('button')]) button.disabled = true;
      return say(`Could not load the session: ${err.message}`);
    }
    stream = followStream({
      url: `/api/sessions/${encodeURIComponent(sessionId)}/stream`,
      headers: taskHeaders,
      afterSeq: 0,
      onEvent,
      onState: (_kind, text) => (streamState.textContent = text),
      isTerminal: (type) => type === 'session_closed',
    });
  })();
  return { close: () => stream?.close() };
}

// The text of a session turn's answer as a reader shows it, folded from the session's events: one model for every
// reader that builds the answer from its deltas (the /ws and kontekst edges, `cadre rpc`). Plain functions over a
// plain object, like team.js.
//
// A model call opens with `activity {state: thinking}`; its deltas count as they stream. Its answer is committed
// with the event that follows them (a tool call or request, an approval asked, a steer delivered, the turn's end).
// An `attempt_lost` before that means the call never reached its boundary: its worker died or was handed the turn
// back, and the next attempt runs the call again and streams it anew — so what it had streamed is dropped.

/** Events written in the same commit as a model call's answer: after one, the call's text stands. */
const SETTLES = new Set(['tool_call', 'tool_request', 'approval_requested', 'input_delivered', 'turn_complete', 'session_error']);

export function emptyAnswer() {
  return { text: '', thinking: '', call: null };
}

export function applyAnswerEvent(answer, e) {
  const p = e.payload ?? {};
  switch (e.event_type) {
    case 'text_delta':
      answer.text += p.content;
      break;
    case 'thinking_delta':
      answer.thinking += p.content;
      break;
    case 'activity':
      if (p.state === 'thinking') answer.call = { text: answer.text.length, thinking: answer.thinking.length };
      break;
    case 'attempt_lost':
      if (answer.call) {
        answer.text = answer.text.slice(0, answer.call.text);
        answer.thinking = answer.thinking.slice(0, answer.call.thinking);
      }
      answer.call = null;
      break;
    default:
      if (SETTLES.has(e.event_type)) answer.call = null;
  }
  return answer;
}

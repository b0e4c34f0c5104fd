// What a session's event says, in a few words, for the board's event log: the answer's deltas are shown in the
// conversation instead, and a raw payload (ids, escaped JSON) tells an operator little. Plain functions, like team.js.
import { clip } from './team.js';

/** Who an event comes from: the person's input, the agent's turn, a tool's answer, a decision, or the session. */
const WHO = {
  user_message: 'user', input_queued: 'user', input_delivered: 'user', input_dropped: 'user',
  activity: 'agent', tool_call: 'agent', tool_request: 'agent', approval_requested: 'agent', turn_complete: 'agent',
  tool_result: 'tool', approval_resolved: 'approval',
};

export function sessionEventSource(e) {
  return WHO[e.event_type] ?? 'session';
}

const ACTIVITY = { thinking: 'thinking', calling_tool: 'calling a tool', waiting_approval: 'waiting on an approval', idle: 'idle' };

export function describeSessionEvent(e) {
  const p = e.payload ?? {};
  switch (e.event_type) {
    case 'session_started': return `session started (model ${p.model})`;
    case 'user_message': return `says: ${clip(p.content ?? '', 80)}`;
    case 'activity': return ACTIVITY[p.state] ?? String(p.state);
    case 'tool_call': return `calls ${p.tool_name}(${clip(p.arguments ?? '', 60)})`;
    case 'tool_request': return `asks the client to run ${p.tool_name}(${clip(JSON.stringify(p.parameters ?? {}), 60)})`;
    case 'tool_result': return `${p.tool_name} ${p.timed_out ? 'timed out' : p.success ? 'returned' : 'failed'}: ${clip(p.result ?? '', 80)}`;
    case 'approval_requested': return `asks to run ${p.tool_name}(${clip(p.arguments ?? '', 60)})${p.reason ? `: ${clip(p.reason, 60)}` : ''}`;
    case 'approval_resolved': return `${p.tool_name} ${p.status}${p.decided_by ? ` by ${p.decided_by}` : ''}${p.reason ? `: ${clip(p.reason, 60)}` : ''}`;
    case 'turn_complete': return `turn ended: ${p.stop_reason} (${p.usage?.total_tokens ?? 0} tokens)`;
    case 'session_error': return `error ${p.code}${p.retryable ? ' (retryable)' : ''}: ${clip(p.message ?? '', 80)}`;
    case 'attempt_lost': return `attempt ${p.attempt} lost (${p.reason}); the turn goes on from its last step`;
    case 'tools_registered': return `${p.tools?.length ?? 0} client tool(s) registered${p.source ? ` for ${p.source}` : ''}`;
    case 'context_compacted': return `context compacted: ${p.tokens_before} → ${p.tokens_after} tokens`;
    case 'input_queued': return `${p.kind} queued (position ${p.position}): ${clip(p.content ?? '', 60)}`;
    case 'input_delivered': return `${p.kind} delivered in turn ${p.turn}`;
    case 'input_dropped': return `${p.kind} dropped: ${p.reason}`;
    case 'session_closed': return `session closed: ${p.reason}`;
    default: return `${e.event_type} ${clip(JSON.stringify(p), 100)}`;
  }
}

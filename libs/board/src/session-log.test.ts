import { describe, expect, it } from 'vitest';
import { describeSessionEvent, sessionEventSource, type SessionEventLike } from './index.ts';

// The board's session log says what happened in words, not as the payload's JSON: the events of one turn that
// asks for an approval, calls a builtin and ends.

const turn: SessionEventLike[] = [
  { event_type: 'session_started', payload: { session_id: '31e87f17-385b-46d5-a66e-d25a9d43d1b3', workspace_id: 'demo', model: 'cadre-scripted' } },
  { event_type: 'user_message', payload: { message_id: 'm1', content: 'What is 6*7?', turn: 1 } },
  { event_type: 'activity', payload: { state: 'thinking', detail: '' } },
  { event_type: 'approval_requested', payload: { approval_id: 's.31e87f17.8bfec21fea32', tool_call_id: 'call_0_0', tool_name: 'calculate', arguments: '{"expression":"6*7"}', reason: 'check the maths', timeout_secs: 600, expires_at: '2026-11-26T07:25:40.047Z', index: 1, count: 1 } },
  { event_type: 'activity', payload: { state: 'waiting_approval', detail: 's.31e87f17.8bfec21fea32' } },
  { event_type: 'approval_resolved', payload: { approval_id: 's.31e87f17.8bfec21fea32', tool_call_id: 'call_0_0', tool_name: 'calculate', approved: true, status: 'approved', reason: '', decided_by: 'operator-key' } },
  { event_type: 'tool_call', payload: { tool_call_id: 'call_0_0', tool_name: 'calculate', arguments: '{"expression":"6*7"}' } },
  { event_type: 'tool_result', payload: { tool_call_id: 'call_0_0', tool_name: 'calculate', success: true, result: '42' } },
  { event_type: 'turn_complete', payload: { message_id: 'm1', stop_reason: 'end_turn', usage: { prompt_tokens: 78, completion_tokens: 36, total_tokens: 114 } } },
  { event_type: 'session_closed', payload: { reason: 'closed by request' } },
];

describe("the board's session log", () => {
  it('describes each event of a turn in words, with who it comes from', () => {
    expect(turn.map((e) => [sessionEventSource(e), describeSessionEvent(e)])).toEqual([
      ['session', 'session started (model cadre-scripted)'],
      ['user', 'says: What is 6*7?'],
      ['agent', 'thinking'],
      ['agent', 'asks to run calculate({"expression":"6*7"}): check the maths'],
      ['agent', 'waiting on an approval'],
      ['approval', 'calculate approved by operator-key'],
      ['agent', 'calls calculate({"expression":"6*7"})'],
      ['tool', 'calculate returned: 42'],
      ['agent', 'turn ended: end_turn (114 tokens)'],
      ['session', 'session closed: closed by request'],
    ]);
  });

  it('says what a client tool, a lost attempt, an error and the input queues did', () => {
    const lines = ([
      ['tool_request', { tool_call_id: 'call_0_0', tool_name: 'read_clipboard', parameters: {}, timeout_ms: 120000 }],
      ['tool_result', { tool_call_id: 'call_0_0', tool_name: 'read_clipboard', success: false, result: 'error: the client did not answer within 120000 ms', timed_out: true }],
      ['attempt_lost', { attempt: 1, host_id: 'vm:1', reason: 'worker_lost', message: '' }],
      ['session_error', { code: 'model_error', message: 'HTTP 500', retryable: true }],
      ['input_queued', { input_id: 'i1', kind: 'steer', content: 'Only price matters', position: 1 }],
      ['input_delivered', { input_id: 'i1', kind: 'steer', turn: 1, content: 'Only price matters' }],
      ['input_dropped', { input_id: 'i2', kind: 'follow_up', reason: 'abort' }],
    ] as const).map(([event_type, payload]) => describeSessionEvent({ event_type, payload }));
    expect(lines).toEqual([
      'asks the client to run read_clipboard({})',
      'read_clipboard timed out: error: the client did not answer within 120000 ms',
      'attempt 1 lost (worker_lost); the turn goes on from its last step',
      'error model_error (retryable): HTTP 500',
      'steer queued (position 1): Only price matters',
      'steer delivered in turn 1',
      'follow_up dropped: abort',
    ]);
  });

  it('shows an event it does not know by its type and payload, clipped', () => {
    const line = describeSessionEvent({ event_type: 'something_new', payload: { text: 'x'.repeat(300) } });
    expect(line.startsWith('something_new {"text":"xxx')).toBe(true);
    expect(line.length).toBeLessThanOrEqual('something_new '.length + 100);
  });
});

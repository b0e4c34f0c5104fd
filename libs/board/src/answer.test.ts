import { describe, expect, it } from 'vitest';
import { applyAnswerEvent, emptyAnswer, type SessionEventLike } from './index.ts';

// The answer every delta-reading edge shows: deltas as they stream, minus what a lost attempt streamed past its
// last boundary (the next attempt streams that model call again).

const thinking: SessionEventLike = { event_type: 'activity', payload: { state: 'thinking', detail: '' } };
const text = (content: string): SessionEventLike => ({ event_type: 'text_delta', payload: { content } });
const thought = (content: string): SessionEventLike => ({ event_type: 'thinking_delta', payload: { content } });
const lost = (reason: string): SessionEventLike => ({ event_type: 'attempt_lost', payload: { attempt: 1, reason } });
const fold = (events: SessionEventLike[]) => events.reduce(applyAnswerEvent, emptyAnswer());

describe('a session answer folded from its events', () => {
  it('is the deltas in order', () => {
    expect(fold([thinking, thought('hm '), text('Hello '), text('there'), { event_type: 'turn_complete' }])).toMatchObject({ text: 'Hello there', thinking: 'hm ' });
  });

  it('drops what a lost attempt streamed in a call that had not reached its boundary; the resumed call streams it once', () => {
    const events = [thinking, thought('hm '), text('Hello th'), lost('worker_shutdown'), thinking, thought('hm '), text('Hello '), text('there')];
    expect(fold(events)).toMatchObject({ text: 'Hello there', thinking: 'hm ' });
  });

  it('keeps an earlier call committed with its tool call, and what a tool step lost leaves standing', () => {
    const before = [thinking, text('Let me compute. '), { event_type: 'tool_call', payload: { tool_name: 'calculate' } }];
    // Lost while the tool ran: no call was streaming, nothing is dropped.
    expect(fold([...before, lost('worker_lost')]).text).toBe('Let me compute. ');
    // Lost in the second call: only that call's text goes.
    expect(fold([...before, { event_type: 'tool_result' }, thinking, text('It is 4'), lost('worker_lost'), thinking, text('It is 42')]).text).toBe('Let me compute. It is 42');
  });

  it('is not cut by events of other writers while a call streams (a queued steer)', () => {
    const events = [thinking, text('Hel'), { event_type: 'input_queued', payload: { kind: 'steer' } }, text('lo'), lost('worker_shutdown'), thinking, text('Hello')];
    expect(fold(events).text).toBe('Hello');
  });
});

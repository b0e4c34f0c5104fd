// The model's tool call ids are not unique: the scripted model numbers them by the assistant messages in its request
// (`call_<n>_<i>`), so once compaction has shortened the transcript it gives out an id it gave before, as servers
// that number calls per response (TGI's "0") do all the time. A repeated id is a new call all the same.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpClient } from '@cadre/testing';
import { sessionEventsWhen, type SessionLogEvent } from './support/session-client.ts';
import { TestStack } from './support/stack.ts';

let stack: TestStack;

beforeAll(async () => {
  stack = await TestStack.start();
});
afterAll(async () => {
  await stack?.stop();
});

const turnsEnded = (n: number) => (evs: SessionLogEvent[]): boolean => evs.filter((e) => e.event_type === 'turn_complete').length === n;

describe('a tool call id the model repeats after compaction', () => {
  it('names a new call: its own deadline, and a late result for the old one does not answer it', async () => {
    const api = httpClient(stack.url);
    const created = await api.post<{ session: { session_id: string } }>('/api/sessions', {
      workspace_id: 'call-ids', max_context_tokens: 256, tools: [{ name: 'ask_user', timeout_ms: 600 }],
    });
    const id = created.body.session.session_id;
    const ask = 'Ask [[scripted:call=ask_user({"q":"ok?"})]] [[scripted:words=150]]';
    // Turn 1: the client never answers; the deadline gives the model a tool error.
    await api.post(`/api/sessions/${id}/messages`, { content: ask });
    const first = await sessionEventsWhen(stack.url, id, turnsEnded(1));
    const firstId = first.find((e) => e.event_type === 'tool_request')!.payload.tool_call_id as string;
    expect(firstId).toBe('call_0_0');
    expect(first.find((e) => e.event_type === 'tool_result')!.payload).toMatchObject({ tool_call_id: firstId, timed_out: true });

    // Turn 2 outgrows the budget: the earlier turn becomes a summary, and the model numbers its call from 0 again.
    await api.post(`/api/sessions/${id}/messages`, { content: ask });
    const asked = await sessionEventsWhen(stack.url, id, (evs) => evs.filter((e) => e.event_type === 'tool_request').length === 2);
    expect(asked.some((e) => e.event_type === 'context_compacted')).toBe(true);
    const secondId = asked.filter((e) => e.event_type === 'tool_request')[1]!.payload.tool_call_id as string;
    expect(secondId).not.toBe(firstId);
    // Within what providers accept back in the transcript: Anthropic's and Bedrock's pattern, OpenAI's 40 characters.
    expect(secondId).toMatch(/^call_0_0_t\d+_\d+_\d+$/);
    expect(secondId).toMatch(/^[A-Za-z0-9_-]{1,40}$/);
    // The first call's late answer finds no call of that id: it is not taken as the new call's.
    expect((await api.post(`/api/sessions/${id}/tool-results`, { tool_call_id: firstId, success: true, result: 'late' })).status).toBe(404);

    // The new call has a deadline of its own (not the first call's job, which already ran).
    const all = await sessionEventsWhen(stack.url, id, turnsEnded(2), 10_000);
    const results = all.filter((e) => e.event_type === 'tool_result').map((e) => e.payload);
    expect(results).toEqual([
      expect.objectContaining({ tool_call_id: firstId, timed_out: true }),
      expect.objectContaining({ tool_call_id: secondId, timed_out: true }),
    ]);
    expect(all.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['end_turn', 'end_turn']);
  }, 60_000);
});

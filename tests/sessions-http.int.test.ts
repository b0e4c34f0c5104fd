import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_API_KEY, assertContiguous, httpClient, type TestRedisClient } from '@cadre/testing';
import { KeyBuilder } from '@cadre/store';
import { TestStack } from './support/stack.ts';
import { sessionEventsWhen } from './support/session-client.ts';

const WS_KEY = 'key-for-ws-other-only';
let stack: TestStack;
let redis: TestRedisClient;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 1, env: { CADRE_API_KEYS: `other:${WS_KEY}` } });
  redis = stack.redis.connect();
});
afterAll(async () => {
  redis?.disconnect();
  await stack?.stop();
});

interface Ev {
  seq: number;
  event_type: string;
  payload: Record<string, any>;
}

const eventsUntil = (sessionId: string, pred: (e: Ev) => boolean): Promise<Ev[]> => sessionEventsWhen<Ev>(stack.url, sessionId, (all) => all.some(pred));

/** Every key of a session, with its type and content: what "nothing written" is checked against. */
async function sessionSnapshot(sessionId: string): Promise<string> {
  const k = new KeyBuilder(stack.prefix).session(sessionId);
  const [meta, events, transcript, calls] = await Promise.all([redis.hgetall(k.meta), redis.xrange(k.events, '-', '+'), redis.lrange(k.transcript, 0, -1), redis.hgetall(k.calls)]);
  return JSON.stringify({ meta, events, transcript, calls });
}

describe('HTTP session API', () => {
  it('drives a session: message, client tool result, events, SSE, close', async () => {
    const api = httpClient(stack.url);
    const created = await api.post<{ session: { session_id: string; status: string; tools: { name: string }[] } }>('/api/sessions', {
      workspace_id: 'web',
      tools: [{ name: 'get_location', description: 'Where the user is', parameters: { type: 'object', properties: { precise: { type: 'boolean' } } } }],
      project_context: ['The user likes short answers.'],
    });
    expect(created.status).toBe(201);
    const { session_id: id } = created.body.session;
    expect(created.body.session.status).toBe('idle');
    expect(created.body.session.tools.map((t) => t.name)).toEqual(['get_location']);

    const sent = await api.post<{ message_id: string }>(`/api/sessions/${id}/messages`, { content: 'Where am I? [[scripted:call=get_location({"precise":true})]]' });
    expect(sent.status).toBe(202);
    const events = await eventsUntil(id, (e) => e.event_type === 'tool_request');
    const request = events.find((e) => e.event_type === 'tool_request')!;
    expect(request.payload).toMatchObject({ tool_name: 'get_location', parameters: { precise: true } });
    // Parked: the session waits for the client, no turn is running on a worker.
    // (the tool_request is logged with the model's answer; the turn parks right after)
    let parked = await api.get<{ session: { status: string; pending_tool_calls: { tool_call_id: string }[] } }>(`/api/sessions/${id}`);
    while (parked.body.session.status === 'running') parked = await api.get(`/api/sessions/${id}`);
    expect(parked.body.session.status).toBe('waiting_tool');
    expect(parked.body.session.pending_tool_calls.map((c) => c.tool_call_id)).toEqual([request.payload.tool_call_id]);
    // A second message while the turn waits is refused.
    expect((await api.post(`/api/sessions/${id}/messages`, { content: 'hello?' })).status).toBe(409);

    const answered = await api.post<{ resumed: boolean }>(`/api/sessions/${id}/tool-results`, { tool_call_id: request.payload.tool_call_id, success: true, result: 'Oslo', exit_code: 0 });
    expect(answered.status).toBe(200);
    expect(answered.body.resumed).toBe(true);
    const all = await eventsUntil(id, (e) => e.event_type === 'turn_complete');
    assertContiguous(all.map((e) => e.seq));
    const text = all.filter((e) => e.event_type === 'text_delta').map((e) => e.payload.content).join('');
    expect(text).toBe('Scripted answer to "Where am I? [[scripted:call=get_location({"precise":true})]]" using 1 tool result(s): Oslo');
    expect(all.filter((e) => e.event_type === 'turn_complete')[0]!.payload).toMatchObject({ message_id: sent.body.message_id, stop_reason: 'end_turn' });

    // SSE from a cursor, then close: the stream ends after session_closed.
    // Its headers arrive once the server watches the session, so the close below reaches a live stream.
    const sse = (await fetch(`${stack.url}/api/sessions/${id}/stream`, { headers: { authorization: `Bearer ${TEST_API_KEY}`, 'last-event-id': String(all.at(-1)!.seq) } })).text();
    const closed = await httpClient(stack.url).request<{ session: { status: string; closed_reason: string } }>('DELETE', `/api/sessions/${id}`, { reason: 'bye' });
    expect(closed.status).toBe(200);
    expect(closed.body.session).toMatchObject({ status: 'closed', closed_reason: 'bye' });
    const body = await sse;
    expect(body).toContain('event: session_closed');
    expect(body).toContain(`id: ${all.at(-1)!.seq + 1}`);
    // A closed session takes no more messages.
    expect((await api.post(`/api/sessions/${id}/messages`, { content: 'still there?' })).status).toBe(409);
  });

  it('cancels a running turn', async () => {
    const api = httpClient(stack.url);
    const { body } = await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'web' });
    const id = body.session.session_id;
    await api.post(`/api/sessions/${id}/messages`, { content: 'Talk slowly [[scripted:words=400]] [[scripted:chunk_delay=30]]' });
    await eventsUntil(id, (e) => e.event_type === 'text_delta');
    const cancelled = await api.post<{ cancelled: boolean }>(`/api/sessions/${id}/cancel`, {});
    expect(cancelled.body.cancelled).toBe(true);
    const events = await eventsUntil(id, (e) => e.event_type === 'turn_complete');
    expect(events.find((e) => e.event_type === 'turn_complete')!.payload.stop_reason).toBe('cancelled');
    // Nothing of the aborted stream lands after the turn's end.
    const last = events.at(-1)!.seq;
    await stack.loopsIdle();
    const after = await api.get<{ events: Ev[] }>(`/api/sessions/${id}/events?after_seq=${last}`);
    expect(after.body.events).toEqual([]);
    // The session takes the next message.
    expect((await api.post(`/api/sessions/${id}/messages`, { content: 'again [[scripted:words=0]] [[scripted:chunk_delay=0]]' })).status).toBe(202);
    await eventsUntil(id, (e) => e.event_type === 'turn_complete' && e.seq > last);
    expect((await api.post<{ cancelled: boolean }>(`/api/sessions/${id}/cancel`)).body.cancelled).toBe(false);
  });

  it('is 404 to another workspace, and bad input writes nothing', async () => {
    const api = httpClient(stack.url);
    const { body } = await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'web' });
    const id = body.session.session_id;
    const before = await sessionSnapshot(id);
    const other = httpClient(stack.url, WS_KEY);
    expect((await other.get(`/api/sessions/${id}`)).status).toBe(404);
    expect((await other.post(`/api/sessions/${id}/messages`, { content: 'hi' })).status).toBe(404);
    expect((await other.get(`/api/sessions/${id}/events`)).status).toBe(404);
    expect((await other.get(`/api/sessions/${id}/events?after_seq=99`)).status).toBe(404);
    expect((await other.request('DELETE', `/api/sessions/${id}`)).status).toBe(404);
    expect((await other.post('/api/sessions', { workspace_id: 'web' })).status).toBe(403);

    const bad: [string, unknown, number, RegExp][] = [
      [`/api/sessions/${id}/messages`, { content: 'x'.repeat(100_001) }, 400, /content/],
      [`/api/sessions/${id}/messages`, { content: '' }, 400, /content/],
      [`/api/sessions/${id}/messages`, { content: 'hi', tools: [{ name: 'bad name!' }] }, 400, /name/],
      [`/api/sessions/${id}/messages`, { content: 'hi', tools: [{ name: 'calc', parameters: { type: 'object', properties: 5 } }] }, 400, /not a valid JSON schema/],
      [`/api/sessions/${id}/messages`, { content: 'hi', tools: Array.from({ length: 65 }, (_, i) => ({ name: `t${i}` })) }, 400, /64/],
      [`/api/sessions/${id}/messages`, { content: 'hi', surprise: 1 }, 400, /unknown field "surprise"/],
      [`/api/sessions/${id}/tool-results`, { tool_call_id: 'nope', success: true, result: 'x' }, 404, /no such tool call/],
      [`/api/sessions/${id}/tool-results`, { tool_call_id: 'c1', success: true, result: 'x', exit_code: 2 }, 400, /success must equal/],
      [`/api/sessions/${id}/tools`, { source: 'sim', tools: [{ name: 'sim__go', parameters: { type: 'string' } }] }, 400, /must describe an object/],
      [`/api/sessions/${id}/tools`, { source: 'sim', tools: [{ name: 'calculate' }] }, 400, /builtin/],
      ['/api/sessions/not-a-uuid/messages', { content: 'hi' }, 400, /UUID/],
      ['/api/sessions/00000000-0000-4000-8000-000000000000/messages', { content: 'hi' }, 404, /not found/],
    ];
    for (const [path, payload, status, message] of bad) {
      const res = await api.post<{ error: { message: string } }>(path, payload);
      expect({ path, status: res.status }).toEqual({ path, status });
      expect(res.body.error.message).toMatch(message);
    }
    expect((await api.post('/api/sessions', { workspace_id: 'web', tools: [{ name: 'x', parameters: { type: 'object', required: 'nope' } }] })).status).toBe(400);
    expect(await sessionSnapshot(id)).toBe(before);
    expect((await api.get(`/api/sessions/${id}/events?after_seq=5`)).status).toBe(410);
  });

  it('replaces a source\'s tools with RegisterTools', async () => {
    const api = httpClient(stack.url);
    const { body } = await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'web', tools: [{ name: 'ide_open' }] });
    const id = body.session.session_id;
    const tools = async () => (await api.get<{ session: { tools: { name: string; source: string }[] } }>(`/api/sessions/${id}`)).body.session.tools.map((t) => `${t.source}:${t.name}`);
    expect((await api.post(`/api/sessions/${id}/tools`, { source: 'sim', tools: [{ name: 'sim__move' }, { name: 'sim__grab' }] })).status).toBe(200);
    expect(await tools()).toEqual([':ide_open', 'sim:sim__move', 'sim:sim__grab']);
    await api.post(`/api/sessions/${id}/tools`, { source: 'sim', tools: [{ name: 'sim__look' }] });
    expect(await tools()).toEqual([':ide_open', 'sim:sim__look']);
    await api.post(`/api/sessions/${id}/tools`, { source: 'sim', tools: [] });
    expect(await tools()).toEqual([':ide_open']);
  });
});

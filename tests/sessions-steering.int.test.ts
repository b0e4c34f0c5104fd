import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { assertContiguous, httpClient, waitUntil, type TestRedisClient } from '@cadre/testing';
import { SessionEngine, SessionQueue } from '@cadre/session';
import { EventFanout, KeyBuilder, SessionStore } from '@cadre/store';
import { TestStack } from './support/stack.ts';
import { sessionEventsWhen } from './support/session-client.ts';

let stack: TestStack;
let redis: TestRedisClient;

beforeAll(async () => {
  // A short enqueue grace, so the sweeper's passes come within the test.
  stack = await TestStack.start({ workers: 1, env: { CADRE_ENQUEUE_GRACE_MS: '400' } });
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
interface Session {
  session_id: string;
  status: string;
  turn: number;
  steering_mode: string;
  follow_up_mode: string;
  interrupt_mode: string;
  queued_steering: { input_id: string; content: string }[];
  queued_follow_ups: { input_id: string; content: string }[];
}

const api = () => httpClient(stack.url);
// A slow stream (one word per 40 ms) so inputs arrive while the model is still answering.
const SLOW = '[[scripted:chunk_delay=40]] [[scripted:words=25]]';

const eventsUntil = (id: string, pred: (all: Ev[]) => boolean): Promise<Ev[]> => sessionEventsWhen<Ev>(stack.url, id, pred);
const count = (type: string, n: number) => (all: Ev[]) => all.filter((e) => e.event_type === type).length >= n;

async function newSession(modes?: Record<string, string>): Promise<string> {
  const created = await api().post<{ session: Session }>('/api/sessions', { workspace_id: 'steer' });
  const id = created.body.session.session_id;
  if (modes) expect((await api().request('PATCH', `/api/sessions/${id}/modes`, modes)).status).toBe(200);
  return id;
}

/** A new session whose turn is streaming (interrupt mode wait), a steer and follow-ups ([input_id, content]) queued behind it. */
async function turnWithQueued(steer: [string, string], followUps: [string, string][]): Promise<string> {
  const id = await newSession({ interrupt_mode: 'wait' });
  await api().post(`/api/sessions/${id}/messages`, { content: `Long answer ${SLOW}` });
  await eventsUntil(id, count('text_delta', 1));
  await api().post(`/api/sessions/${id}/steer`, { content: steer[1], input_id: steer[0] });
  for (const [inputId, content] of followUps) await api().post(`/api/sessions/${id}/follow-ups`, { content, input_id: inputId });
  return id;
}

const answers = (all: Ev[]) => {
  // The text of each model answer, split at the events that end one (a delivered steer or a turn's end).
  const out: string[] = [];
  let current = '';
  for (const e of all) {
    if (e.event_type === 'text_delta') current += e.payload.content;
    if ((e.event_type === 'input_delivered' || e.event_type === 'turn_complete') && current) {
      out.push(current);
      current = '';
    }
  }
  return out;
};

describe('steering and follow-ups', () => {
  it('an immediate steer cuts the model stream short; the next model call sees it in the same turn', async () => {
    const id = await newSession();
    await api().post(`/api/sessions/${id}/messages`, { content: `Compare X and Y ${SLOW}` });
    await eventsUntil(id, count('text_delta', 1));
    const steer = await api().post<{ input_id: string; outcome: string; position: number }>(`/api/sessions/${id}/steer`, { content: 'Only price matters', input_id: 'steer-1' });
    expect(steer.status).toBe(202);
    expect(steer.body).toMatchObject({ input_id: 'steer-1', outcome: 'queued', position: 1 });
    const all = await eventsUntil(id, count('turn_complete', 1));
    assertContiguous(all.map((e) => e.seq));
    const types = all.map((e) => e.event_type);
    expect(all.find((e) => e.event_type === 'input_queued')!.payload).toMatchObject({ input_id: 'steer-1', kind: 'steer', position: 1 });
    expect(all.find((e) => e.event_type === 'input_delivered')!.payload).toMatchObject({ input_id: 'steer-1', kind: 'steer', turn: 1 });
    expect(types.indexOf('input_delivered')).toBeLessThan(types.indexOf('turn_complete'));
    const texts = answers(all);
    expect(texts.at(-1)).toMatch(/^Scripted answer to "Only price matters"/);
    // Cut short: the first answer never reached its end.
    expect(texts[0]!.length).toBeLessThan(texts.at(-1)!.length);
    const turnEnds = all.filter((e) => e.event_type === 'turn_complete');
    expect(turnEnds).toHaveLength(1);
    expect(turnEnds[0]!.payload.stop_reason).toBe('end_turn');
    const transcript = (await redis.lrange(new KeyBuilder(stack.prefix).session(id).transcript, 0, -1)).map((m) => JSON.parse(m) as { role: string; content: string });
    expect(transcript.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant']);
    expect(transcript[2]!.content).toBe('Only price matters');
  });

  it('wait mode: the steer stays queued (visible in state) until the model call ends, then the turn goes on', async () => {
    const id = await newSession({ interrupt_mode: 'wait', steering_mode: 'all' });
    await api().post(`/api/sessions/${id}/messages`, { content: `Plan a trip ${SLOW}` });
    await eventsUntil(id, count('text_delta', 1));
    await api().post(`/api/sessions/${id}/steer`, { content: 'Go by train', input_id: 'a' });
    await api().post(`/api/sessions/${id}/steer`, { content: 'Leave on Monday', input_id: 'b' });
    const state = await api().get<{ session: Session }>(`/api/sessions/${id}`);
    expect(state.body.session).toMatchObject({ status: 'running', interrupt_mode: 'wait', steering_mode: 'all' });
    expect(state.body.session.queued_steering.map((q) => q.content)).toEqual(['Go by train', 'Leave on Monday']);
    const all = await eventsUntil(id, count('turn_complete', 1));
    const texts = answers(all);
    // The first answer ran to its end; both steers were delivered at one boundary (mode all).
    expect(texts[0]).toMatch(/^Scripted answer to "Plan a trip/);
    expect(texts.at(-1)).toMatch(/^Scripted answer to "Leave on Monday"/);
    expect(all.filter((e) => e.event_type === 'input_delivered').map((e) => [e.payload.input_id, e.payload.turn])).toEqual([['a', 1], ['b', 1]]);
    expect((await api().get<{ session: Session }>(`/api/sessions/${id}`)).body.session.queued_steering).toEqual([]);
  });

  it('follow-ups one at a time run as the next turns, in order', async () => {
    const id = await newSession();
    await api().post(`/api/sessions/${id}/messages`, { content: `First ${SLOW}` });
    await eventsUntil(id, count('text_delta', 1));
    await api().post(`/api/sessions/${id}/follow-ups`, { content: 'Second', input_id: 'f2' });
    // The prompt route queues too when asked to (pi's streamingBehavior).
    const viaMessage = await api().post<{ outcome: string; kind: string }>(`/api/sessions/${id}/messages`, { content: 'Third', message_id: 'f3', streaming_behavior: 'follow_up' });
    expect(viaMessage.body).toMatchObject({ outcome: 'queued', kind: 'follow_up' });
    expect((await api().get<{ session: Session }>(`/api/sessions/${id}`)).body.session.queued_follow_ups.map((q) => q.input_id)).toEqual(['f2', 'f3']);
    const all = await eventsUntil(id, count('turn_complete', 3));
    expect(all.filter((e) => e.event_type === 'input_delivered').map((e) => [e.payload.input_id, e.payload.turn])).toEqual([['f2', 2], ['f3', 3]]);
    expect(all.filter((e) => e.event_type === 'user_message').map((e) => e.payload.content.split(' ')[0])).toEqual(['First', 'Second', 'Third']);
    const [, second, third] = answers(all);
    expect(second).toMatch(/^Scripted answer to "Second"/);
    expect(third).toMatch(/^Scripted answer to "Third"/);
  });

  it('follow-ups in mode all are batched into one turn', async () => {
    const id = await newSession({ follow_up_mode: 'all' });
    await api().post(`/api/sessions/${id}/messages`, { content: `First ${SLOW}` });
    await eventsUntil(id, count('text_delta', 1));
    await api().post(`/api/sessions/${id}/follow-ups`, { content: 'Second', input_id: 'f2' });
    await api().post(`/api/sessions/${id}/follow-ups`, { content: 'Third', input_id: 'f3' });
    const all = await eventsUntil(id, count('turn_complete', 2));
    // The turn that ends also starts the next one in the same step: idle at turn 2 means no third turn comes.
    expect((await api().get<{ session: Session }>(`/api/sessions/${id}`)).body.session).toMatchObject({ status: 'idle', turn: 2, queued_follow_ups: [] });
    expect(all.filter((e) => e.event_type === 'input_delivered').map((e) => [e.payload.input_id, e.payload.turn])).toEqual([['f2', 2], ['f3', 2]]);
    expect(answers(all).at(-1)).toMatch(/^Scripted answer to "Third"/);
  });

  it('abort drops the queues with an outcome for each; abort-and-prompt starts the next turn at once', async () => {
    const id = await newSession({ interrupt_mode: 'wait' });
    await api().post(`/api/sessions/${id}/messages`, { content: `Long one ${SLOW}` });
    await eventsUntil(id, count('text_delta', 1));
    await api().post(`/api/sessions/${id}/steer`, { content: 'never', input_id: 's1' });
    await api().post(`/api/sessions/${id}/follow-ups`, { content: 'never either', input_id: 'f1' });
    const aborted = await api().post<{ aborted: boolean; dropped: number }>(`/api/sessions/${id}/abort`);
    expect(aborted.body).toMatchObject({ aborted: true, dropped: 2 });
    const all = await eventsUntil(id, count('turn_complete', 1));
    expect(all.filter((e) => e.event_type === 'input_dropped').map((e) => [e.payload.input_id, e.payload.kind, e.payload.reason])).toEqual([['s1', 'steer', 'abort'], ['f1', 'follow_up', 'abort']]);
    expect(all.find((e) => e.event_type === 'turn_complete')!.payload.stop_reason).toBe('cancelled');
    const idle = (await api().get<{ session: Session }>(`/api/sessions/${id}`)).body.session;
    expect(idle).toMatchObject({ status: 'idle', queued_steering: [], queued_follow_ups: [] });

    await api().post(`/api/sessions/${id}/messages`, { content: `Another ${SLOW}` });
    await eventsUntil(id, count('text_delta', 2));
    const replaced = await api().post<{ aborted: boolean; message_id: string }>(`/api/sessions/${id}/abort`, { prompt: { content: 'Short instead', message_id: 'p3' } });
    expect(replaced.body).toMatchObject({ aborted: true, message_id: 'p3' });
    const done = await eventsUntil(id, count('turn_complete', 3));
    const ends = done.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason);
    expect(ends).toEqual(['cancelled', 'cancelled', 'end_turn']);
    expect(answers(done).at(-1)).toMatch(/^Scripted answer to "Short instead"/);
  });

  it('cancel drops the steers meant for the cancelled turn; queued follow-ups run as the next turns, as after an error', async () => {
    const id = await turnWithQueued(['s1', 'for the cancelled turn'], [['f1', 'Next question'], ['f2', 'Last question']]);
    const cancelled = await api().post<{ cancelled: boolean }>(`/api/sessions/${id}/cancel`, {});
    expect(cancelled.body).toMatchObject({ cancelled: true });
    const all = await eventsUntil(id, count('turn_complete', 3));
    assertContiguous(all.map((e) => e.seq));
    expect(all.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['cancelled', 'end_turn', 'end_turn']);
    // Every input has its one outcome: the steer dropped (never injected into an unrelated turn), each follow-up run.
    expect(all.filter((e) => e.event_type === 'input_dropped').map((e) => e.payload)).toEqual([{ input_id: 's1', kind: 'steer', reason: 'cancelled' }]);
    expect(all.filter((e) => e.event_type === 'input_delivered').map((e) => [e.payload.input_id, e.payload.kind, e.payload.turn])).toEqual([['f1', 'follow_up', 2], ['f2', 'follow_up', 3]]);
    const types = all.map((e) => e.event_type);
    expect(types.indexOf('turn_complete')).toBeLessThan(types.indexOf('input_dropped'));
    const [, next, last] = answers(all);
    expect(next).toMatch(/^Scripted answer to "Next question"/);
    expect(last).toMatch(/^Scripted answer to "Last question"/);
    expect(all.some((e) => e.event_type === 'text_delta' && e.payload.content.includes('cancelled turn'))).toBe(false);
    await waitUntil('the session to be idle', async () => (await api().get<{ session: Session }>(`/api/sessions/${id}`)).body.session.status === 'idle');
    expect((await api().get<{ session: Session }>(`/api/sessions/${id}`)).body.session).toMatchObject({ turn: 3, queued_steering: [], queued_follow_ups: [] });
  });

  it('a steer or follow-up on an idle session starts a turn; bad input is refused and writes nothing', async () => {
    const id = await newSession();
    const started = await api().post<{ outcome: string; input_id: string }>(`/api/sessions/${id}/steer`, { content: 'Hello there' });
    expect(started.body.outcome).toBe('started');
    const all = await eventsUntil(id, count('turn_complete', 1));
    expect(all.find((e) => e.event_type === 'input_delivered')!.payload).toMatchObject({ input_id: started.body.input_id, turn: 1 });
    expect(answers(all)[0]).toMatch(/^Scripted answer to "Hello there"/);

    const k = new KeyBuilder(stack.prefix).session(id);
    const before = JSON.stringify([await redis.hgetall(k.meta), await redis.xlen(k.events)]);
    expect((await api().post(`/api/sessions/${id}/steer`, { content: '' })).status).toBe(400);
    expect((await api().post(`/api/sessions/${id}/follow-ups`, { content: 'x', extra: 1 })).status).toBe(400);
    expect((await api().request('PATCH', `/api/sessions/${id}/modes`, { steering_mode: 'sometimes' })).status).toBe(400);
    expect((await api().request('PATCH', `/api/sessions/${id}/modes`, {})).status).toBe(400);
    expect((await api().post(`/api/sessions/${id}/abort`, { prompt: { content: '' } })).status).toBe(400);
    expect(JSON.stringify([await redis.hgetall(k.meta), await redis.xlen(k.events)])).toBe(before);
  });

  it('closing a session drops its queued steers and follow-ups, each with an input_dropped outcome', async () => {
    const id = await turnWithQueued(['st-1', 'steer me'], [['fu-1', 'then this'], ['fu-2', 'and this']]);
    expect((await api().request('DELETE', `/api/sessions/${id}`)).status).toBe(200);
    const all = await eventsUntil(id, count('session_closed', 1));
    assertContiguous(all.map((e) => e.seq));
    const dropped = all.filter((e) => e.event_type === 'input_dropped').map((e) => e.payload);
    expect(dropped).toEqual([
      { input_id: 'st-1', kind: 'steer', reason: 'session_closed' },
      { input_id: 'fu-1', kind: 'follow_up', reason: 'session_closed' },
      { input_id: 'fu-2', kind: 'follow_up', reason: 'session_closed' },
    ]);
    expect(all.some((e) => e.event_type === 'input_delivered')).toBe(false);
    expect(all.at(-1)!.event_type).toBe('session_closed');
    const { body } = await api().get<{ session: Session }>(`/api/sessions/${id}`);
    expect(body.session).toMatchObject({ status: 'closed', queued_steering: [], queued_follow_ups: [] });
  });

  it('a turn whose enqueuer died after starting it (state written, no job) is enqueued by the sweeper and finishes', async () => {
    const id = await newSession();
    const keys = new KeyBuilder(stack.prefix);
    const store = new SessionStore({ redis, keys });
    // What a gateway does before it dies: marks the change, starts the turn (one script), and never adds the job.
    const mark = `${id} died-before-enqueue`;
    await store.markEnqueueing(mark);
    const wake = await store.startTurn(id, { message_id: 'orphan-1', content: 'Are you still there?' });
    expect(wake).toBe(1);
    const all = await eventsUntil(id, count('turn_complete', 1));
    assertContiguous(all.map((e) => e.seq));
    expect(all.find((e) => e.event_type === 'turn_complete')!.payload).toMatchObject({ message_id: 'orphan-1', stop_reason: 'end_turn' });
    expect(answers(all)).toEqual([expect.stringMatching(/^Scripted answer to "Are you still there\?"/)]);
    expect(await redis.zscore(keys.sessionsEnqueueing(), mark)).toBeNull();
    const { body } = await api().get<{ session: Session }>(`/api/sessions/${id}`);
    expect(body.session.status).toBe('idle');
  });

  it('an approval decided by a gateway whose enqueue of the continuation failed (it died in between) is resumed by the sweeper', async () => {
    const created = await api().post<{ session: Session }>('/api/sessions', { workspace_id: 'steer', approval_policy: { rules: [{ tool: 'calculate', action: 'ask' }] } });
    const id = created.body.session.session_id;
    await api().post(`/api/sessions/${id}/messages`, { content: 'Compute [[scripted:call=calculate({"expression":"6*7"})]]' });
    const asked = (await eventsUntil(id, count('approval_requested', 1))).find((e) => e.event_type === 'approval_requested')!;
    await waitUntil('the turn to park on its approval', async () => (await api().get<{ session: Session }>(`/api/sessions/${id}`)).body.session.status === 'waiting_tool');
    // The decision as a gateway makes it, through the engine, with its BullMQ connection gone: the decision script
    // runs on the store's connection, then adding the continuation's job fails — what a crash between the two leaves.
    const keys = new KeyBuilder(stack.prefix);
    const lost = new Redis({ port: 1, maxRetriesPerRequest: 0, retryStrategy: () => null, lazyConnect: true });
    const deadQueue = new SessionQueue({ connection: lost, keys, onError: () => undefined });
    const subscriber = stack.redis.connect();
    const engine = new SessionEngine({ store: new SessionStore({ redis, keys }), queue: deadQueue, fanout: new EventFanout({ keys, subscriber }), defaultModel: 'cadre-scripted' });
    try {
      await expect(engine.decideApproval({ workspaces: 'steer' }, id, asked.payload.approval_id, true, '', 'test')).rejects.toThrow();
    } finally {
      await deadQueue.close().catch(() => undefined);
      subscriber.disconnect();
    }
    // The mark the decision left brings the sweeper (enqueue grace 400 ms): the tool runs and the turn completes.
    const all = await eventsUntil(id, count('turn_complete', 1));
    assertContiguous(all.map((e) => e.seq));
    expect(all.find((e) => e.event_type === 'tool_result')!.payload).toMatchObject({ tool_name: 'calculate', success: true, result: '42' });
    expect(all.find((e) => e.event_type === 'turn_complete')!.payload.stop_reason).toBe('end_turn');
    expect(await redis.zcard(keys.sessionsEnqueueing())).toBe(0);
  });

  it('an immediate-steer notice that arrives late (its steer already delivered) does not cut the next answer short', async () => {
    const id = await newSession();
    await api().post(`/api/sessions/${id}/messages`, { content: `Tell me a story ${SLOW}` });
    await eventsUntil(id, count('text_delta', 1));
    // The notice a steer sends (lua/queueInput-8.lua) reaching the worker after the boundary that delivered the
    // steer: the model call running now answers that steer, and nothing waits.
    await redis.publish(new KeyBuilder(stack.prefix).cancelChannel(), `steer:${id}`);
    const all = await eventsUntil(id, count('turn_complete', 1));
    assertContiguous(all.map((e) => e.seq));
    expect(answers(all)).toEqual([expect.stringMatching(/^Scripted answer to "Tell me a story/)]);
    const transcript = (await redis.lrange(new KeyBuilder(stack.prefix).session(id).transcript, 0, -1)).map((m) => JSON.parse(m) as { role: string; content: string });
    expect(transcript.map((m) => m.role)).toEqual(['user', 'assistant']);
    // The streamed text is the whole answer, once: the stream was not cut and asked again.
    expect(answers(all)[0]).toBe(transcript[1]!.content);
  });
});

// A session turn whose BullMQ job a failover lost (its add acknowledged by a dying master) leaves the session
// `running` with nothing to run it: no sweep finds it, and every later message is refused turn_in_progress. A client
// touching the session does (session read repair): the gateway adds the turn's job again and the turn runs. A parked
// session (no job by design) and a moving one cost such reads nothing. The loss is made by deleting keys, on a real stack.
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { AGENT_QUEUE, KeyBuilder } from '@cadre/store';
import { assertContiguous, httpClient, waitUntil, type TestRedisClient } from '@cadre/testing';
import { loseJobById } from './support/lost-jobs.ts';
import { Scrape } from './support/prometheus.ts';
import { sessionEvents, sessionEventsWhen, type SessionLogEvent } from './support/session-client.ts';
import { TestStack } from './support/stack.ts';

const WORKSPACE = 'sessionrepair';
let stack: TestStack | undefined;
let redis: TestRedisClient | undefined;
/** Connections watching Redis's commands (MONITOR), and the clients they were made from. */
let monitors: Redis[] = [];
let queue: Queue | undefined;

async function startStack(graceMs: number): Promise<{ stack: TestStack; redis: TestRedisClient; queue: Queue; keys: KeyBuilder }> {
  stack = await TestStack.start({ workers: 0, env: { CADRE_ENQUEUE_GRACE_MS: String(graceMs) } });
  redis = stack.redis.connect();
  const keys = new KeyBuilder(stack.prefix);
  queue = new Queue(AGENT_QUEUE, { connection: redis, prefix: keys.bullPrefix() });
  return { stack, redis, queue, keys };
}
afterEach(async () => {
  for (const m of monitors) m.disconnect();
  monitors = [];
  await queue?.close();
  redis?.disconnect();
  await stack?.stop();
  stack = redis = queue = undefined;
});

const repaired = async (url: string): Promise<number> => (await Scrape.of(`${url}/metrics`)).value('cadre_session_turns_repaired_total', {});

async function openSession(url: string, body: object = {}): Promise<string> {
  const res = await httpClient(url).post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: WORKSPACE, ...body });
  expect(res.status).toBe(201);
  return res.body.session.session_id;
}

async function send(url: string, sessionId: string, content: string): Promise<number> {
  return (await httpClient(url).post(`/api/sessions/${sessionId}/messages`, { content })).status;
}

/** The id of the session's turn job waiting in the queue. */
async function waitingTurnJob(queue: Queue, sessionId: string): Promise<string> {
  const ids = (await queue.getWaiting()).map((j) => j.id!).filter((id) => id.startsWith(`s_${sessionId}_w`));
  expect(ids).toHaveLength(1);
  return ids[0]!;
}

/** Read straight from Redis (not through the gateway, which is what is under test). */
const meta = async (redis: TestRedisClient, keys: KeyBuilder, sessionId: string): Promise<{ status: string; updated: number }> => {
  const [status, updated] = await redis.hmget(keys.session(sessionId).meta, 'status', 'updated_at');
  return { status: status!, updated: Number(updated) };
};

/** Waits until the session has not changed for longer than the grace, by Redis's clock: a client's touch then counts. */
async function pastGrace(redis: TestRedisClient, keys: KeyBuilder, sessionId: string, graceMs: number): Promise<void> {
  await waitUntil('the session to be older than the grace', async () => {
    const [[seconds, micros], { updated }] = await Promise.all([redis.time(), meta(redis, keys, sessionId)]);
    return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000) - updated > graceMs;
  });
}

/**
 * Every look for one of the session's turn jobs: a client's (not a script's) EXISTS of its key, which the repair sends
 * beside the job's state (BullMQ's own scripts name the job too, so those are not counted).
 */
async function watchTurnJobReads(sessionId: string): Promise<string[][]> {
  const seen: string[][] = [];
  const client = stack!.redis.connect() as Redis;
  const monitor = await client.monitor();
  monitors.push(client, monitor);
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source !== 'lua' && args[0]?.toLowerCase() === 'exists' && args.some((a) => a.includes(`s_${sessionId}_w`))) seen.push(args);
  });
  return seen;
}

type Ev = SessionLogEvent & { timestamp: string };

/** The turn ended once, its log whole: seq contiguous, one user message, one turn_complete, no attempt lost. */
function expectOneTurn(events: SessionLogEvent[]): void {
  assertContiguous(events.map((e) => e.seq));
  const count = (type: string): number => events.filter((e) => e.event_type === type).length;
  expect({ user_message: count('user_message'), turn_complete: count('turn_complete'), attempt_lost: count('attempt_lost') })
    .toEqual({ user_message: 1, turn_complete: 1, attempt_lost: 0 });
}

describe('session read repair', () => {
  it('a message whose turn job was lost while it waited for a worker: the client\'s next read makes the turn run, once', async () => {
    const graceMs = 500;
    const { stack, redis, queue, keys } = await startStack(graceMs);
    await stack.addWorkerPool({ WORKER_CONCURRENCY: '1' });
    const ahead = await openSession(stack.url);
    const stuck = await openSession(stack.url);
    // The one worker slot is busy with a slow turn, so the second turn's job waits in the queue: it is lost there.
    expect(await send(stack.url, ahead, 'Explain slowly [[scripted:words=60]] [[scripted:chunk_delay=20]]')).toBe(202);
    await sessionEventsWhen(stack.url, ahead, (evs) => evs.some((e) => e.event_type === 'text_delta'));
    expect(await send(stack.url, stuck, 'Answer [[scripted:words=30]]')).toBe(202);
    const jobId = await waitingTurnJob(queue, stuck);
    await loseJobById(redis, queue, jobId);

    // The slot frees up, and nothing runs the lost turn: every message is refused, as before a repair.
    await sessionEventsWhen(stack.url, ahead, (evs) => evs.some((e) => e.event_type === 'turn_complete'));
    await waitUntil('no job active', async () => (await queue.getActiveCount()) === 0);
    expect((await meta(redis, keys, stuck)).status).toBe('running');
    expect(await queue.getJob(jobId)).toBeUndefined();
    expect(await repaired(stack.url)).toBe(0);

    await pastGrace(redis, keys, stuck, graceMs);
    const read = await httpClient(stack.url).get<{ session: { status: string } }>(`/api/sessions/${stuck}`);
    expect(read.status).toBe(200);
    expect(read.body.session.status).toBe('running');
    await waitUntil('the read to add the turn\'s job again', async () => (await repaired(stack.url)) === 1);

    const events = await sessionEventsWhen(stack.url, stuck, (evs) => evs.some((e) => e.event_type === 'turn_complete'));
    expectOneTurn(events);
    expect(await queue.getJobState(jobId)).toBe('completed');
    expect((await meta(redis, keys, stuck)).status).toBe('idle');
    expect(await send(stack.url, stuck, 'Again [[scripted:words=5]]')).toBe(202);
    expect(await repaired(stack.url)).toBe(1);
  });

  it('a parked session (waiting on a client tool) is never touched; a stuck one the same client touches is repaired', async () => {
    const graceMs = 500;
    const { stack, redis, queue, keys } = await startStack(graceMs);
    const parked = await openSession(stack.url, { tools: [{ name: 'ask_user', timeout_ms: 600_000 }] });
    const stuck = await openSession(stack.url);
    expect(await send(stack.url, parked, 'Ask [[scripted:call=ask_user({"q":"ok?"})]]')).toBe(202);
    expect(await send(stack.url, stuck, 'Answer [[scripted:words=30]]')).toBe(202);
    await loseJobById(redis, queue, await waitingTurnJob(queue, stuck));
    await stack.addWorkerPool();
    await waitUntil('the turn to park', async () => (await meta(redis, keys, parked)).status === 'waiting_tool');
    await waitUntil('no job active', async () => (await queue.getActiveCount()) === 0);
    const parkedAt = await sessionEvents(stack.url, parked);

    const reads = await watchTurnJobReads(parked);
    const stuckReads = await watchTurnJobReads(stuck);
    await pastGrace(redis, keys, parked, graceMs);
    await pastGrace(redis, keys, stuck, graceMs);
    // A message to the stuck one, refused: a turn is in progress. That alone repairs it.
    expect(await send(stack.url, stuck, 'Anyone there?')).toBe(409);
    await waitUntil('the stuck session\'s job to be added again', async () => (await repaired(stack.url)) === 1);
    // The same reads of both (the session, its log). (A message to the parked one would interrupt its turn.)
    for (const id of [parked, stuck]) {
      for (let i = 0; i < 5; i++) {
        expect((await httpClient(stack.url).get(`/api/sessions/${id}`)).status).toBe(200);
        expect((await httpClient(stack.url).get(`/api/sessions/${id}/events?after_seq=0&limit=1000`)).status).toBe(200);
      }
    }
    expectOneTurn(await sessionEventsWhen(stack.url, stuck, (evs) => evs.some((e) => e.event_type === 'turn_complete')));

    expect(reads).toEqual([]);
    // What would have shown a look for the parked session's job: one look for the stuck one's.
    expect(stuckReads).toHaveLength(1);
    expect((await meta(redis, keys, parked)).status).toBe('waiting_tool');
    expect(await sessionEvents(stack.url, parked)).toEqual(parkedAt);
    expect(await repaired(stack.url)).toBe(1);
  });

  it('a healthy streaming session read many times past the grace: its job is never looked for; a stuck one read as often, once', async () => {
    const graceMs = 1_000;
    const { stack, redis, queue, keys } = await startStack(graceMs);
    const id = await openSession(stack.url);
    const stuck = await openSession(stack.url);
    // About 8 s of streaming (a chunk every 40 ms, each committed, which moves the session's updated_at): long enough
    // to outlast the grace and the 20 reads below on a busy machine (a 2.7 s stream ended before them in one CI run).
    expect(await send(stack.url, id, 'Explain slowly [[scripted:words=600]] [[scripted:chunk_delay=40]]')).toBe(202);
    expect(await send(stack.url, stuck, 'Answer [[scripted:words=30]]')).toBe(202);
    await loseJobById(redis, queue, await waitingTurnJob(queue, stuck));
    await stack.addWorkerPool();
    await sessionEventsWhen(stack.url, id, (evs) => evs.some((e) => e.event_type === 'text_delta'));
    const started = Date.parse((await sessionEvents<Ev>(stack.url, id)).find((e) => e.event_type === 'user_message')!.timestamp);
    const reads = await watchTurnJobReads(id);
    const stuckReads = await watchTurnJobReads(stuck);
    // The turn started longer ago than the grace, and it streams still.
    await waitUntil('the turn to be older than the grace', async () => {
      const [seconds] = await redis.time();
      return Number(seconds) * 1000 - started > graceMs + 1_000;
    });
    await pastGrace(redis, keys, stuck, graceMs);

    let readsWhileRunning = 0;
    for (let i = 0; i < 20; i++) {
      const [session] = await Promise.all([
        httpClient(stack.url).get<{ session: { status: string } }>(`/api/sessions/${id}`),
        httpClient(stack.url).get(`/api/sessions/${id}/events?after_seq=0&limit=1000`),
        httpClient(stack.url).get(`/api/sessions/${stuck}`),
        httpClient(stack.url).get(`/api/sessions/${stuck}/events?after_seq=0&limit=1000`),
      ]);
      if (session.body.session.status === 'running') readsWhileRunning++;
    }
    expect(readsWhileRunning).toBe(20);
    expectOneTurn(await sessionEventsWhen(stack.url, id, (evs) => evs.some((e) => e.event_type === 'turn_complete')));
    expectOneTurn(await sessionEventsWhen(stack.url, stuck, (evs) => evs.some((e) => e.event_type === 'turn_complete')));
    expect(reads).toEqual([]);
    // What would have shown a look for the healthy session's job: one look for the stuck one's, however many reads.
    expect(stuckReads).toHaveLength(1);
    expect(await repaired(stack.url)).toBe(1);
  });
});

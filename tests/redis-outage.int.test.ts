// Workers ride out a Redis outage. A failover as a worker meets it: the node it writes to turns replica (every write
// refused with READONLY, the reply a Cluster client also ends with once its ~20 s of retries are spent), then is
// gone, then comes back a master with its data. A loop caught by it hands its job back and another attempt resumes
// it; a third outage of the same job (CADRE_MAX_ATTEMPTS) ends it failed, saying why. And closing a pool while
// Redis never comes back resolves within its bound, with no loop left running.
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { LOOP_STOPPED_REDIS_UNAVAILABLE } from '../apps/worker/src/processors/hand-back.ts';
import { assertContiguous, httpClient, pollUntilTerminal, startRestartableRedis, waitForEvent, waitUntil, type RestartableRedis } from '@cadre/testing';
import { Scrape } from './support/prometheus.ts';
import { sessionEventsWhen, type SessionLogEvent } from './support/session-client.ts';
import { TestStack, freePort } from './support/stack.ts';

/** How long Redis is gone once a loop has met the refused writes: a setup parameter of the outage, not a wait for a state. */
const DOWN_MS = 3_000;
/** Longer than the outage, so the attempt's lease is still its own when Redis is back (the hand-back is fenced by it). */
const LOCK_MS = '30000';

let stack: TestStack | undefined;
let redis: RestartableRedis | undefined;
let redisDown = false;
/** The worker pool's log from warn up, line by line (what an operator reads). */
let workerLog: Array<{ msg: string; event?: string; workerId?: string; err?: { message?: string } }> = [];

afterEach(async () => {
  // The gateway and the other closes need a Redis to say goodbye to.
  if (redisDown) await redis?.restart();
  redisDown = false;
  await stack?.stop();
  stack = undefined;
});

async function startStack(env: Record<string, string> = {}): Promise<TestStack> {
  redis = await startRestartableRedis();
  stack = await TestStack.start({ redis, workers: 0 });
  workerLog = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void workerLog.push(JSON.parse(line)) });
  await stack.addWorkerPool({ CADRE_JOB_LOCK_MS: LOCK_MS, WORKER_METRICS_PORT: String(await freePort()), WORKER_METRICS_HOST: '127.0.0.1', ...env }, logger);
  return stack;
}

/** The worker's cadre_agent_jobs_handed_back_total by reason, read from its /metrics. */
async function handedBack(): Promise<Record<'worker_shutdown' | 'redis_unavailable', number>> {
  const scrape = await Scrape.of(`http://127.0.0.1:${stack!.pools[0]!.metricsPort}/metrics`);
  const count = (reason: string): number => scrape.value('cadre_agent_jobs_handed_back_total', { reason });
  return { worker_shutdown: count('worker_shutdown'), redis_unavailable: count('redis_unavailable') };
}

/**
 * The outage: writes refused (the node demoted to a replica of an address nobody answers on) until `refused`
 * resolves, then Redis gone, then back. `refusing` runs as soon as writes are refused.
 */
async function failover(refusing: () => void, refused: () => Promise<unknown>): Promise<void> {
  const admin = new Redis(redis!.url);
  await admin.replicaof('127.0.0.1', await freePort());
  admin.disconnect();
  refusing();
  await refused();
  redis!.kill();
  redisDown = true;
  await sleep(DOWN_MS);
  await redis!.restart();
  redisDown = false;
}

/** Resolves once the worker pool logged a loop (the one `whose` picks) stopped by a write refused with READONLY. */
function stoppedOnRefusedWrite(whose: (line: (typeof workerLog)[number]) => boolean): Promise<unknown> {
  return waitUntil('a loop to stop on a refused write', () =>
    workerLog.some((line) => line.event === LOOP_STOPPED_REDIS_UNAVAILABLE && line.err?.message?.startsWith('READONLY') && whose(line)));
}

async function createTask(workers: object[]): Promise<string> {
  const res = await httpClient(stack!.url).post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: 'outage', goal: 'Ride it out', team: { workers } });
  expect(res.status).toBe(201);
  return res.body.task.task_id;
}

/** Its model's answer waits at the gate `failover` until the test lets it through (every attempt's after that). */
const WAITER = { role: 'waiter', instructions: 'Answer when let through. [[scripted:hold=failover]]' };

/** A task of one worker, the failover while its loop runs, and the task's log once it ended (contiguous). */
async function waiterThroughFailover(env: Record<string, string> = {}) {
  await startStack(env);
  const taskId = await createTask([WAITER]);
  // Mid-loop: its model call waits at the gate, let through once writes are refused; Redis goes away only once the
  // loop has met the refusal (its next write, the answer's, refused with READONLY), however long that took.
  await stack!.model.holding('failover');
  await failover(() => stack!.model.release('failover'), () => stoppedOnRefusedWrite((line) => line.workerId === 'waiter-1'));
  const events = await pollUntilTerminal(stack!.url, taskId, 60_000);
  assertContiguous(events.map((e) => e.seq));
  return { events, mine: events.filter((e) => e.worker_id === 'waiter-1') };
}

describe('a Redis outage under a running team task', () => {
  it('the worker mid-loop hands its job back (released, redis_unavailable) and its next attempt completes the task', async () => {
    const { events, mine } = await waiterThroughFailover();
    expect(mine.filter((e) => e.event_type === 'worker_failed')).toEqual([
      expect.objectContaining({ attempt: 1, payload: expect.objectContaining({ reason: 'redis_unavailable', message: expect.stringContaining('READONLY') }) }),
    ]);
    expect(mine.filter((e) => e.event_type === 'worker_started').map((e) => e.attempt)).toEqual([1, 2]);
    expect(mine.at(-2)).toMatchObject({ event_type: 'worker_completed', attempt: 2 });
    expect(events.some((e) => (e.payload as { reason?: string }).reason === 'internal_error')).toBe(false);
    expect(events.at(-1)!.event_type).toBe('task_completed');
    // The worker counts each hand-back the outage caused (the waiter's, and the lead's if the outage caught it too).
    const released = events.filter((e) => e.event_type === 'worker_failed' && (e.payload as { reason?: string }).reason === 'redis_unavailable');
    expect(await handedBack()).toEqual({ worker_shutdown: 0, redis_unavailable: released.length });
  }, 90_000);

  it('an outage that finds the job once more than its attempts allow fails the worker with reason redis_unavailable, and the task', async () => {
    // One attempt: the first outage is already the last one the job may go through.
    const { events, mine } = await waiterThroughFailover({ CADRE_MAX_ATTEMPTS: '1' });
    expect(mine.filter((e) => e.event_type === 'worker_started').map((e) => e.attempt)).toEqual([1]);
    expect(mine.filter((e) => e.event_type === 'worker_failed').map((e) => e.payload)).toEqual([
      expect.objectContaining({ reason: 'redis_unavailable', message: expect.stringContaining('outage 1 of at most 1') }),
    ]);
    expect(events.at(-1)).toMatchObject({ event_type: 'task_failed' });
    // Given up on, not handed back: not counted.
    expect(await handedBack()).toEqual({ worker_shutdown: 0, redis_unavailable: 0 });
  }, 90_000);
});

/** A session turn mid-answer, the failover, and the session's log once `done` holds for it (contiguous). */
async function turnThroughFailover(done: (events: SessionLogEvent[]) => boolean, env: Record<string, string> = {}): Promise<SessionLogEvent[]> {
  await startStack(env);
  const api = httpClient(stack!.url);
  const created = await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'outage' });
  const sessionId = created.body.session.session_id;
  expect((await api.post(`/api/sessions/${sessionId}/messages`, { content: 'Explain slowly [[scripted:words=120]] [[scripted:chunk_delay=50]]' })).status).toBe(202);
  await sessionEventsWhen(stack!.url, sessionId, (evs) => evs.some((e) => e.event_type === 'text_delta'));
  // Redis goes away only once the turn has met the refusal (its next delta's write, refused with READONLY).
  await failover(() => undefined, () => stoppedOnRefusedWrite(() => true));
  const evs = await sessionEventsWhen(stack!.url, sessionId, done, 60_000);
  assertContiguous(evs.map((e) => e.seq));
  return evs;
}

const turnEnded = (evs: SessionLogEvent[]): boolean => evs.some((e) => e.event_type === 'turn_complete');

describe('a Redis outage under a running session turn', () => {
  it('the turn mid-answer is handed back (attempt_lost, redis_unavailable) and resumes to its end from its last boundary', async () => {
    const evs = await turnThroughFailover(turnEnded);
    expect(evs.filter((e) => e.event_type === 'attempt_lost').map((e) => e.payload)).toEqual([
      expect.objectContaining({ attempt: 1, reason: 'redis_unavailable' }),
    ]);
    expect(evs.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['end_turn']);
    expect(evs.some((e) => e.event_type === 'session_error')).toBe(false);
    expect(await handedBack()).toEqual({ worker_shutdown: 0, redis_unavailable: 1 });
  }, 90_000);

  it('an outage past the attempts ends the turn in a retryable redis_unavailable error', async () => {
    const evs = await turnThroughFailover(turnEnded, { CADRE_MAX_ATTEMPTS: '1' });
    expect(evs.some((e) => e.event_type === 'attempt_lost')).toBe(false);
    expect(evs.filter((e) => e.event_type === 'session_error').map((e) => e.payload)).toEqual([
      expect.objectContaining({ code: 'redis_unavailable', retryable: true, message: expect.stringContaining('outage 1 of at most 1') }),
    ]);
    expect(evs.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['error']);
    expect(await handedBack()).toEqual({ worker_shutdown: 0, redis_unavailable: 0 });
  }, 90_000);
});

describe('closing a worker pool while Redis is down', () => {
  it('resolves with BullMQ\'s worker closed (not given up on at the bound) and no loop left running', async () => {
    await startStack();
    const pool = stack!.pools[0]!;
    // Two loops waiting on their model when Redis dies; their next writes wait for a Redis that never comes back.
    const taskId = await createTask([
      { role: 'thinker', instructions: 'Think long. [[scripted:delay=30000]]' },
      { role: 'sleeper', instructions: 'Sleep. [[scripted:call=wait({"ms":30000})]]', tools: ['wait'] },
    ]);
    await waitForEvent(stack!.url, taskId, (e) => e.event_type === 'worker_phase' && e.worker_id === 'thinker-1');
    await waitForEvent(stack!.url, taskId, (e) => e.event_type === 'worker_tool_call' && e.worker_id === 'sleeper-2');
    expect(pool.runningLoops()).toBe(2);
    redis!.kill();
    redisDown = true;

    const closing = Date.now();
    const { workerClosed } = await pool.close(500);
    expect(workerClosed).toBe(true);
    expect(pool.runningLoops()).toBe(0);
    process.stderr.write(`pool.close(500) with Redis down: resolved in ${Date.now() - closing} ms\n`);
    stack!.pools = [];
  }, 30_000);
});

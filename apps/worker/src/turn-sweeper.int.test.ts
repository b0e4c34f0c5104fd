// The turn sweep's paging over a real BullMQ failed set larger than one pass's bound (small bounds, so it stays
// fast): a turn whose job fails after a pass is ended by the very next one — also when its worker's clock runs
// behind, so it lands behind failures the sweep has read — and the rest of the set is still gone through, page
// after page, down to its oldest job.
import { randomUUID } from 'node:crypto';
import { Queue, Worker } from 'bullmq';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { SessionQueue } from '@cadre/session';
import { AGENT_QUEUE, KeyBuilder, SessionStore, connectRedis, type RedisClient } from '@cadre/store';
import { startTestRedis, waitUntil, type TestRedis } from '@cadre/testing';
import { TurnSweeper } from './turn-sweeper.ts';

const OTHER_FAILURES = 25;
const keys = new KeyBuilder(`sweep${process.pid}`);
let redis: TestRedis;
let connection: RedisClient;
let workerConnection: RedisClient;
let failing: Worker;
let otherJobs: Queue;
let sessionQueue: SessionQueue;
let store: SessionStore;

beforeAll(async () => {
  redis = await startTestRedis();
  connection = connectRedis(redis.url, 'test-turn-sweeper');
  // Every job of the agent queue fails at its one attempt, as a turn whose worker hit a bug.
  workerConnection = connectRedis(redis.url, 'test-failing-worker');
  failing = new Worker(AGENT_QUEUE, async (): Promise<void> => {
    throw new Error('the job failed');
  }, { connection: workerConnection, prefix: keys.bullPrefix(), concurrency: 10 });
  otherJobs = new Queue(AGENT_QUEUE, { connection, prefix: keys.bullPrefix() });
  sessionQueue = new SessionQueue({ connection, keys, onError: () => undefined });
  store = new SessionStore({ redis: connection, keys });
});
afterAll(async () => {
  await failing?.close();
  await otherJobs?.close();
  await sessionQueue?.close();
  connection?.disconnect();
  workerConnection?.disconnect();
  await redis?.stop();
});

afterEach(() => {
  vi.useRealTimers();
});

/** Jobs of other kinds (a team's) that fail, as many as `count`. */
async function otherFailures(count: number): Promise<void> {
  const failedBefore = await otherJobs.getFailedCount();
  await otherJobs.addBulk(Array.from({ length: count }, (_, i) => ({ name: 'agent', data: { i }, opts: { attempts: 1 } })));
  await waitUntil('the other jobs to fail', async () => (await otherJobs.getFailedCount()) === failedBefore + count);
}

/** Jobs fail by the failing worker's clock: here, this process's, set `aheadMs` from now (behind when negative). */
function workerClock(aheadMs: number): void {
  vi.useFakeTimers({ toFake: ['Date'] });
  vi.setSystemTime(Date.now() + aheadMs);
}

/** A sweep of at most 10 jobs a pass, 4 a read. */
const smallSweeper = (lateFailureMs: number): TurnSweeper => new TurnSweeper({
  queue: sessionQueue, store, maxAttempts: 3, intervalMs: 60_000, logger: pino({ level: 'silent' }),
  // The give-up's write (SessionTurnRunner.giveUp without its enqueue): ends the turn only if still at that wake.
  endTurn: async (turn, error) => (await store.cancelTurn(turn.sessionId, 'error', { error: { ...error, retryable: true }, onlyWake: turn.wake })) !== null,
  pageSize: 4, maxPerPass: 10, lateFailureMs,
});

const status = async (sessionId: string): Promise<string | undefined> => (await store.sessionHead(sessionId))?.status;

/** A session whose turn is running, and whose turn job has failed for good: only the sweep is left to end it. */
async function strandedTurn(): Promise<string> {
  const session = await store.createSession({
    workspace_id: 'sweep', model: 'm', tools: [], transcript: [], project_context: [], system_context: '', max_context_tokens: 1000, approval_policy: [], stop_on_denial: false,
  });
  const wake = await store.startTurn(session.session_id, { message_id: randomUUID(), content: 'hello' });
  const failedBefore = await otherJobs.getFailedCount();
  await sessionQueue.enqueueTurn(session.session_id, wake);
  await waitUntil('the turn job to fail', async () => (await otherJobs.getFailedCount()) > failedBefore);
  return session.session_id;
}

/** Waits until this process's clock has moved past the newest failure: a pass starting now comes after it. */
async function clockPastNewestFailure(): Promise<void> {
  const [newest] = await otherJobs.getFailed(0, 0);
  await waitUntil('the clock to move past the newest failure', () => Date.now() > newest!.finishedOn!, { everyMs: 1 });
}

describe('the turn sweep over a failed set larger than one pass', () => {
  it('ends a turn that failed after a pass in the next pass, and goes on through the older jobs down to the oldest', async () => {
    const oldest = await strandedTurn();
    await otherFailures(OTHER_FAILURES);
    await clockPastNewestFailure();
    const sweeper = smallSweeper(0);

    // The first pass reads the newest ten: the oldest job, a stranded turn, is not among them.
    expect(await sweeper.sweep()).toEqual({ read: 10, ended: 0 });
    expect(await status(oldest)).toBe('running');
    // A turn fails now, at the new end of the set: the next pass reads it first, then nine more of the older jobs.
    const late = await strandedTurn();
    expect(await sweeper.sweep()).toEqual({ read: 10, ended: 1 });
    expect(await status(late)).toBe('idle');
    expect(await status(oldest)).toBe('running');
    // The pass after reads the last seven older jobs, the oldest among them, and the next starts again at the newest.
    expect(await sweeper.sweep()).toEqual({ read: 7, ended: 1 });
    expect(await status(oldest)).toBe('idle');
    expect(await sweeper.sweep()).toEqual({ read: 10, ended: 0 });
  });

  it('ends a turn whose job failed after a pass by a clock running behind, landing behind failures already read', async () => {
    await otherJobs.clean(0, 0, 'failed');
    expect(await otherJobs.getFailedCount()).toBe(0);
    // Failures from long before the look-back (ten minutes ago), more than a pass reads, then three of the present.
    workerClock(-600_000);
    await otherFailures(OTHER_FAILURES);
    vi.useRealTimers();
    await otherFailures(3);
    await clockPastNewestFailure();
    const sweeper = smallSweeper(60_000);

    // The three newest, then seven of the old ones.
    expect(await sweeper.sweep()).toEqual({ read: 10, ended: 0 });
    // A turn fails on a worker whose clock is 30 s behind: its job lands behind the three already read.
    workerClock(-30_000);
    const late = await strandedTurn();
    vi.useRealTimers();
    // The next pass reads the last minute again, that job among it, before going on with the old ones.
    expect(await sweeper.sweep()).toEqual({ read: 10, ended: 1 });
    expect(await status(late)).toBe('idle');
  });
});

import { WaitingError, type Job } from 'bullmq';
import type { Logger } from '@cadre/observability';
import { isRedisUnavailable, retryWhileUnavailable } from '@cadre/store';

export interface HandBack<D> {
  /** Writes the attempt's end into its log (fenced by the lease); a refusal (lease lost, owner ended) is not fatal. */
  record?: () => Promise<unknown>;
  /** Job data the next attempt reads (e.g. how many outages the job has been through). */
  data?: Partial<D>;
  /** How long the writes, all together, wait for Redis to answer (again), and what cuts that wait short. */
  waitMs: number;
  signal?: AbortSignal;
  log: Logger;
}

/**
 * How long a hand-back on shutdown waits for Redis: the drain deadline has passed, so no longer than the pool's
 * close gives the hand-backs before it cuts the connections (worker-pool's CLOSE_HAND_BACK_MS).
 */
export const SHUTDOWN_HAND_BACK_MS = 5_000;

/**
 * Hands a running job back to the queue for another attempt: records the attempt's end, then moves the job to
 * wait under its lock. The writes wait out a Redis that cannot answer for up to `waitMs` in all, also on one node
 * where a command would wait for a dead Redis without end. If Redis does not answer in that time, nothing more is
 * tried (a write given up on may still land later: the lease and the lock fence it): the job stays active without
 * a renewed lock, and BullMQ's stall check retakes it once Redis is back and the lock has expired (which counts against the job's attempts). Always
 * throws WaitingError, which tells BullMQ the job was moved (or left) by us; a lost lock surfaces as moveToWait's error.
 */
export async function handJobBack<D>(job: Job<D>, lease: string, how: HandBack<D>): Promise<never> {
  const giveUpAt = Date.now() + how.waitMs;
  const wait = (): { withinMs: number; signal?: AbortSignal } => ({ withinMs: Math.max(0, giveUpAt - Date.now()), ...(how.signal && { signal: how.signal }) });
  try {
    if (how.record) {
      await retryWhileUnavailable(how.record, wait()).catch((err: unknown) => {
        if (isRedisUnavailable(err)) throw err;
      });
    }
    if (how.data) await retryWhileUnavailable(() => job.updateData({ ...job.data, ...how.data }), wait());
    await retryWhileUnavailable(() => job.moveToWait(lease), wait());
  } catch (err) {
    if (!isRedisUnavailable(err)) throw err;
    how.log.warn({ err }, 'Redis did not answer in time to hand the job back: the stall check retakes it once its lock expires');
  }
  throw new WaitingError();
}

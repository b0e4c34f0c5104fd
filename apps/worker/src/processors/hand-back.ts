import { WaitingError, type Job } from 'bullmq';
import type { Logger } from '@cadre/observability';
import { isRedisUnavailable, retryWhileUnavailable } from '@cadre/store';

export interface HandBack<D> {
  /** Writes the attempt's end into its log (fenced by the lease); a refusal (lease lost, owner ended) is not fatal. */
  record?: () => Promise<unknown>;
  /** Job data the next attempt reads (e.g. how many outages the job has been through). */
  data?: Partial<D>;
  /** How long each write waits for Redis to answer again (0: one try), and what cuts that wait short. */
  waitMs: number;
  signal?: AbortSignal;
  log: Logger;
}

/**
 * Hands a running job back to the queue for another attempt: records the attempt's end, then moves the job to
 * wait under its lock. Either write waits out a Redis that cannot answer for up to `waitMs`. If Redis does not
 * come back in that time, nothing more is tried: the job stays active without a renewed lock, and BullMQ's stall
 * check retakes it once Redis is back and the lock has expired (which counts against the job's attempts). Always
 * throws WaitingError, which tells BullMQ the job was moved (or left) by us; a lost lock surfaces as moveToWait's error.
 */
export async function handJobBack<D>(job: Job<D>, lease: string, how: HandBack<D>): Promise<never> {
  const wait = { withinMs: how.waitMs, ...(how.signal && { signal: how.signal }) };
  try {
    if (how.record) {
      await retryWhileUnavailable(how.record, wait).catch((err: unknown) => {
        if (isRedisUnavailable(err)) throw err;
      });
    }
    if (how.data) await retryWhileUnavailable(() => job.updateData({ ...job.data, ...how.data }), wait);
    await retryWhileUnavailable(() => job.moveToWait(lease), wait);
  } catch (err) {
    if (!isRedisUnavailable(err)) throw err;
    how.log.warn({ err }, 'Redis did not answer in time to hand the job back: the stall check retakes it once its lock expires');
  }
  throw new WaitingError();
}

import { UnrecoverableError, WaitingError, type Job } from 'bullmq';
import type { Logger } from '@cadre/observability';
import { StoreError, isRedisUnavailable, retryWhileUnavailable } from '@cadre/store';

export interface HandBack<D> {
  /**
   * Writes the attempt's end into its log (fenced by the lease). A refusal (a StoreError: lease lost, owner ended)
   * is not fatal; any other failure is logged and the job still goes back.
   */
  record?: () => Promise<unknown>;
  /** Job data the next attempt reads (e.g. how many outages the job has been through). */
  data?: Partial<D>;
  /** How long the writes, all together, wait for Redis to answer (again), and what cuts that wait short. */
  waitMs: number;
  signal?: AbortSignal;
  log: Logger;
  /** Hears that the job is back in the queue (its moveToWait succeeded), e.g. to count it. */
  onHandedBack?: () => void;
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
        if (!(err instanceof StoreError)) how.log.warn({ err }, 'could not record the attempt\'s end; handing the job back all the same');
      });
    }
    if (how.data) await retryWhileUnavailable(() => job.updateData({ ...job.data, ...how.data }), wait());
    await retryWhileUnavailable(() => job.moveToWait(lease), wait());
    how.onHandedBack?.();
  } catch (err) {
    if (!isRedisUnavailable(err)) throw err;
    how.log.warn({ err }, 'Redis did not answer in time to hand the job back: the stall check retakes it once its lock expires');
  }
  throw new WaitingError();
}

/** The `event` field of the log line a loop stopped by a Redis outage writes (rideOutOutage). */
export const LOOP_STOPPED_REDIS_UNAVAILABLE = 'loop_stopped_redis_unavailable';

/** Why a running job went back to the queue: the drain deadline passed, or a write found Redis unavailable. */
export type HandBackReason = 'worker_shutdown' | 'redis_unavailable';

export interface OutageRide {
  /** The write's failure that found Redis unavailable. */
  err: Error;
  /** Who met the outage, for the message (e.g. "to host w-1"); none: the message says only what happened. */
  where?: string;
  /** The outage that finds the job for this many times ends it. */
  maxAttempts: number;
  /** How long the writes wait for Redis to answer again (the job's lock duration: past it the lease is gone). */
  waitMs: number;
  signal: AbortSignal;
  log: Logger;
  /** Records the attempt's end as handed back (released / attempt_lost, reason redis_unavailable). */
  release: (message: string) => Promise<unknown>;
  /** Records the job's end at the bound (worker_failed / the turn's session_error, reason redis_unavailable). */
  giveUp: (message: string) => Promise<unknown>;
  /** Hears that the job is back in the queue (an outage below the bound, its moveToWait succeeded). */
  onHandedBack?: () => void;
}

/**
 * A write of a loop found Redis unavailable (down, failing over, the client's retries spent): not a verdict on the
 * job. Once Redis answers again the job is handed back (`release`) and the next attempt starts over, counting the
 * outage in its job data; the outage that finds the job for the maxAttempts-th time ends it honestly (`giveUp`) and
 * fails the job for good. If even that cannot be written, the stall check ends it once Redis is back. A refusal of
 * the give-up write (a StoreError: the lease is lost, the owner already ended) means the end is someone else's to
 * write and already written: the job still fails for good with its reason, rather than as a plain store error.
 */
export async function rideOutOutage<D extends { outages?: number }>(job: Job<D>, lease: string, ride: OutageRide): Promise<never> {
  const outages = (job.data.outages ?? 0) + 1;
  const message = `Redis was unavailable${ride.where ? ` ${ride.where}` : ''} (${ride.err.message.split('\n')[0]}); outage ${outages} of at most ${ride.maxAttempts}`;
  // `event` is what tools (and the outage tests) match on; the message is for people and may be reworded.
  ride.log.warn({ event: LOOP_STOPPED_REDIS_UNAVAILABLE, err: ride.err, outages }, 'loop stopped: Redis unavailable');
  if (outages < ride.maxAttempts) {
    const data = { outages } as Partial<D>;
    return handJobBack(job, lease, { record: () => ride.release(message), data, waitMs: ride.waitMs, signal: ride.signal, log: ride.log, onHandedBack: ride.onHandedBack });
  }
  try {
    await retryWhileUnavailable(() => ride.giveUp(message), { withinMs: ride.waitMs, signal: ride.signal });
  } catch (e) {
    if (isRedisUnavailable(e)) throw new WaitingError();
    if (!(e instanceof StoreError)) throw e;
  }
  throw new UnrecoverableError(`redis_unavailable: ${message}`);
}

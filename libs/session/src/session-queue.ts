import { randomUUID } from 'node:crypto';
import { Job, Queue, type ConnectionOptions, type Telemetry } from 'bullmq';
import { AGENT_QUEUE, type ClientCall, type KeyBuilder, type RedisClient, type SessionStore } from '@cadre/store';

/** Session jobs share the agent queue, so turns and team workers draw on one pool of worker slots. */
export const SESSION_TURN_JOB = 'session-turn';
export const TOOL_DEADLINE_JOB = 'session-tool-deadline';
export const APPROVAL_DEADLINE_JOB = 'session-approval-deadline';

/** Runs (or resumes) the turn that `wake` names. */
export interface SessionTurnJobData {
  sessionId: string;
  wake: number;
  /** How many attempts handed this turn back because Redis could not take their writes (bounded by the attempts). */
  outages?: number;
}

/** A turn job BullMQ failed for good, as the failed set keeps it. */
export interface FailedTurnJob {
  sessionId: string;
  wake: number;
  jobId: string;
}

/**
 * A place in BullMQ's failed set, which is sorted by when each job failed (finishedOn, ms, by the failing worker's
 * clock): the jobs failed at `at`, of which `skip` were read already (several may fail in one millisecond).
 */
export interface FailedSetCursor {
  at: number;
  skip: number;
}

/** A client tool call's deadline: if the call is still pending, the model gets a tool error. */
export interface ToolDeadlineJobData {
  sessionId: string;
  toolCallId: string;
  timeoutMs: number;
}

/** An approval's deadline: if it is still pending, it expires (denied with "approval timed out"). */
export interface ApprovalDeadlineJobData {
  sessionId: string;
  approvalId: string;
}

export type SessionJobData = SessionTurnJobData | ToolDeadlineJobData | ApprovalDeadlineJobData;

const JOB_OPTIONS = { attempts: 1, removeOnComplete: { age: 3600, count: 10_000 }, removeOnFail: { age: 24 * 3600 } } as const;
/**
 * A deadline's job retries what it could not write (Redis failing over, out of memory): its expiry is the only thing
 * that moves a parked turn on when the client never answers. 12 attempts 1, 2, 4 … 2,048 s apart ride out about an
 * hour: a Redis left out of memory waits for an operator, for minutes, not seconds. (A turn job keeps one attempt:
 * its outages and lost workers have their own bounds.)
 */
const DEADLINE_JOB_OPTIONS = { ...JOB_OPTIONS, attempts: 12, backoff: { type: 'exponential', delay: 1_000 } } as const;

/**
 * Job ids derive from the session and its wake (or call), so a repeated enqueue adds nothing: exactly one job
 * runs each start or resume of a turn.
 */
export const turnJobId = (sessionId: string, wake: number): string => `s_${sessionId}_w${wake}`;
/** The session and wake a turn job's id names (turnJobId's inverse); null for any other job's id. */
const turnOfJobId = (jobId: string): { sessionId: string; wake: number } | null => {
  const match = /^s_(.+)_w(\d+)$/.exec(jobId);
  return match && !match[1]!.includes('_d_') ? { sessionId: match[1]!, wake: Number(match[2]) } : null;
};
export const deadlineJobId = (sessionId: string, toolCallId: string): string => `s_${sessionId}_d_${toolCallId}`;
export const approvalDeadlineJobId = (approvalId: string): string => `a_${approvalId}`;

export class SessionQueue {
  private readonly queue: Queue<SessionJobData>;
  /** The queue's own connection: the failed set is read by time with it. */
  private readonly redis: RedisClient;

  /**
   * `telemetry`: BullMQ's tracing hook, as the team queue's (a turn's job continues its enqueuer's trace).
   * `onError` hears the queue's connection errors (without a listener BullMQ prints them, AUTH arguments included).
   */
  constructor(opts: { connection: RedisClient; keys: KeyBuilder; telemetry?: Telemetry | undefined; onError: (err: Error) => void }) {
    this.queue = new Queue<SessionJobData>(AGENT_QUEUE, {
      connection: opts.connection as unknown as ConnectionOptions, prefix: opts.keys.bullPrefix(), ...(opts.telemetry && { telemetry: opts.telemetry }),
    });
    this.queue.on('error', opts.onError);
    this.redis = opts.connection;
  }

  async enqueueTurn(sessionId: string, wake: number): Promise<void> {
    await this.queue.add(SESSION_TURN_JOB, { sessionId, wake }, { ...JOB_OPTIONS, jobId: turnJobId(sessionId, wake) });
  }

  /**
   * Adds the turn's job again if a failover lost it (its add or its move acknowledged by a master that died): true if
   * it did. Lost: no job hash, or a hash in none of the queue's lists and sets (then it goes first, or the add, by
   * the same id, would add nothing). A job that is there (waiting, active, delayed, even finished) is left as it is.
   */
  async enqueueLostTurn(sessionId: string, wake: number): Promise<boolean> {
    const jobId = turnJobId(sessionId, wake);
    const [exists, state] = await Promise.all([this.redis.exists(this.queue.toKey(jobId)), this.queue.getJobState(jobId)]);
    if (exists === 1 && state !== 'unknown') return false;
    if (exists === 1 && (await this.queue.remove(jobId)) === 0) return false;
    await this.enqueueTurn(sessionId, wake);
    return true;
  }

  /** A delayed job, not a sleeping process: waiting for a client costs no worker slot. */
  async scheduleDeadline(sessionId: string, toolCallId: string, delayMs: number, timeoutMs: number): Promise<void> {
    await this.queue.add(TOOL_DEADLINE_JOB, { sessionId, toolCallId, timeoutMs }, { ...DEADLINE_JOB_OPTIONS, jobId: deadlineJobId(sessionId, toolCallId), delay: Math.max(0, delayMs) });
  }

  /** An approval's timeout, also a delayed job: a pending approval holds no worker and no sleeping process. */
  async scheduleApprovalDeadline(sessionId: string, approvalId: string, delayMs: number): Promise<void> {
    await this.queue.add(APPROVAL_DEADLINE_JOB, { sessionId, approvalId }, { ...DEADLINE_JOB_OPTIONS, jobId: approvalDeadlineJobId(approvalId), delay: Math.max(0, delayMs) });
  }

  /**
   * The deadlines of a turn's pending calls: an approval's while it is asked, else a client call's own. Idempotent
   * (job ids per call or approval), so a park, a resumed attempt and the enqueue sweeper may each arm them again.
   */
  async armDeadlines(sessionId: string, pending: readonly ClientCall[]): Promise<void> {
    await Promise.all(pending.map((c) => c.approval?.status === 'pending'
      ? this.scheduleApprovalDeadline(sessionId, c.approval.approval_id, c.approval.expires_at - Date.now())
      : this.scheduleDeadline(sessionId, c.tool_call_id, c.deadline_ms - Date.now(), c.timeout_ms)));
  }

  /**
   * A page of the jobs BullMQ failed for good (kept a day: removeOnFail), from `from` towards the `older` or `newer`
   * end: the turn jobs among them, named by their ids (no job is read: most failed turns ended long ago), how many
   * failed jobs of any kind the page held (fewer than `count`: it reached the end), and the cursor after them. Paged
   * by time, not by index, so jobs failing meanwhile do not shift the pages.
   */
  async failedTurnsFrom(from: FailedSetCursor, direction: 'older' | 'newer', count: number): Promise<{ turns: FailedTurnJob[]; read: number; next: FailedSetCursor }> {
    const key = this.queue.keys.failed!;
    const bound = scoreBound(from.at);
    const flat = direction === 'older'
      ? await this.redis.zrevrangebyscore(key, bound, '-inf', 'WITHSCORES', 'LIMIT', from.skip, count)
      : await this.redis.zrangebyscore(key, bound, '+inf', 'WITHSCORES', 'LIMIT', from.skip, count);
    const ids: string[] = [];
    let next = from;
    for (let i = 0; i < flat.length; i += 2) {
      ids.push(flat[i]!);
      const at = Number(flat[i + 1]);
      next = at === next.at ? { at, skip: next.skip + 1 } : { at, skip: 1 };
    }
    const turns = ids.flatMap((jobId) => {
      const turn = turnOfJobId(jobId);
      return turn ? [{ ...turn, jobId }] : [];
    });
    return { turns, read: ids.length, next };
  }

  /**
   * Why BullMQ failed a turn job (what it threw, or its stall check's "job stalled more than allowable limit"); null
   * when the job is gone (its day is up) or is not a failed turn job.
   */
  async failedReasonOf(jobId: string): Promise<string | null> {
    const job = await Job.fromId<SessionJobData>(this.queue, jobId);
    return job?.name === SESSION_TURN_JOB && job.failedReason !== undefined ? job.failedReason : null;
  }

  async close(): Promise<void> {
    await this.queue.close();
  }
}

const scoreBound = (at: number): string => (at === Infinity ? '+inf' : at === -Infinity ? '-inf' : String(at));

/**
 * Makes a change that may wake a turn (`wakeOf` reads the wake from its result, 0 = none) and enqueues that turn's
 * job. Two steps on two slots, so the store marks the session before the change (same connection, so the mark is
 * written first) and the mark goes once the job is in: a process that dies in between leaves it for the enqueue
 * sweeper (SessionEngine.enqueueStranded). `then` (e.g. an approved call's deadline) runs before the mark goes, so the
 * sweeper covers it too: it arms the deadlines of the session's pending calls.
 */
export async function changeAndEnqueue<T>(
  store: SessionStore, queue: SessionQueue, sessionId: string, change: () => Promise<T>, wakeOf: (result: T) => number, then?: (result: T) => Promise<void>,
): Promise<T> {
  const mark = `${sessionId} ${randomUUID()}`;
  // A mark that could not be written (Redis unreachable) fails the change behind it on the same connection.
  const marked = store.markEnqueueing(mark).catch(() => undefined);
  let result: T;
  try {
    result = await change();
  } catch (err) {
    await marked;
    await store.enqueued(mark).catch(() => undefined);
    throw err;
  }
  await marked;
  const wake = wakeOf(result);
  if (wake > 0) await queue.enqueueTurn(sessionId, wake);
  await then?.(result);
  await store.enqueued(mark);
  return result;
}

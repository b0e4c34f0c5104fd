import { WaitingError, type Job } from 'bullmq';
import { annotateSpan, type Logger } from '@cadre/observability';
import { APPROVAL_DEADLINE_JOB, SESSION_TURN_JOB, TOOL_DEADLINE_JOB, type ApprovalDeadlineJobData, type SessionJobData, type SessionTurnJobData, type ToolDeadlineJobData, type TurnObserver, type TurnRunner, turnSeconds } from '@cadre/session';
import { StoreError, isRedisUnavailable, type SessionStore } from '@cadre/store';
import type { AbortCause, CancelRegistry } from '../cancel-registry.ts';
import { SHUTDOWN_HAND_BACK_MS, handJobBack, rideOutOutage, type HandBackReason } from './hand-back.ts';

export interface SessionJobDeps {
  runner: TurnRunner;
  cancels: CancelRegistry;
  store: SessionStore;
  logger: Logger;
  /** How many times a turn may be handed back because Redis could not take its writes before it ends in error. */
  maxAttempts: number;
  /** How long a turn whose write found Redis unavailable waits for it to answer again (the job's lock duration). */
  redisWaitMs: number;
  /** Hears of a turn this processor ends (the outage bound): the worker's session metrics. */
  turns?: TurnObserver;
  /** Hears of each job back in the queue, once its moveToWait succeeded: the drain deadline passed, or a write found Redis unavailable. */
  onHandedBack?: (reason: HandBackReason) => void;
}

export interface SessionJobResult {
  sessionId: string;
  outcome: 'finished' | 'parked' | 'stale' | 'cancelled' | 'expired';
}

/**
 * Runs session jobs from the agent queue: a turn (start or continuation) through the durable TurnRunner, a
 * client tool's deadline, or an approval's. The job's lock token is the turn's lease; a cancel (any gateway) aborts the loop
 * through the cancel registry within milliseconds, and the lease check there catches a missed message.
 */
export class SessionJobProcessor {
  private readonly deps: SessionJobDeps;
  private readonly running = new Map<string, AbortController>();

  constructor(deps: SessionJobDeps) {
    this.deps = deps;
  }

  static handles(job: Job): boolean {
    return job.name === SESSION_TURN_JOB || job.name === TOOL_DEADLINE_JOB || job.name === APPROVAL_DEADLINE_JOB;
  }

  abortJob(jobId: string, cause: AbortCause): void {
    this.running.get(jobId)?.abort(cause);
  }

  /** Aborts every running turn. */
  abortAll(cause: AbortCause): void {
    for (const ac of this.running.values()) ac.abort(cause);
  }

  readonly process = async (job: Job<SessionJobData>, token?: string): Promise<SessionJobResult> => {
    // The job's span (BullMQ's consumer span, in the trace of the turn) names its session.
    annotateSpan({ session_id: job.data.sessionId, ...('wake' in job.data && { 'cadre.wake': job.data.wake }) });
    if (job.name === TOOL_DEADLINE_JOB) {
      const { sessionId, toolCallId, timeoutMs } = job.data as ToolDeadlineJobData;
      await this.deps.runner.expireToolCall(sessionId, toolCallId, timeoutMs);
      return { sessionId, outcome: 'expired' };
    }
    if (job.name === APPROVAL_DEADLINE_JOB) {
      const { sessionId, approvalId } = job.data as ApprovalDeadlineJobData;
      await this.deps.runner.expireApproval(sessionId, approvalId);
      return { sessionId, outcome: 'expired' };
    }
    if (!token) throw new Error('session jobs need a lock token');
    const { sessionId, wake } = job.data as SessionTurnJobData;
    const log = this.deps.logger.child({ sessionId, wake, jobId: job.id });
    // Claimed before the cancel check is registered: that check aborts a loop whose lease is not the job's.
    const turn = await this.deps.runner.claim(sessionId, wake, token).catch((err: unknown) => {
      // Nothing of this attempt is written yet: the stall check retakes the job once its lock expires and Redis answers.
      if (isRedisUnavailable(err)) throw new WaitingError();
      throw err;
    });
    if (turn === null) return { sessionId, outcome: 'stale' };
    const ac = this.deps.cancels.register(sessionId, async () => (await this.deps.store.turnLease(sessionId)) !== token, token);
    this.running.set(job.id!, ac);
    try {
      const outcome = await this.deps.runner.run(turn, ac.signal);
      return { sessionId, outcome };
    } catch (err) {
      const cause = ac.signal.reason as AbortCause | undefined;
      if (cause === 'shutdown') {
        // Hand the turn back: it resumes on another worker from its last boundary. The drain deadline has passed.
        const why = { reason: 'worker_shutdown', message: 'the worker running this turn shut down; the turn resumes on another worker from its last boundary' } as const;
        return handJobBack(job, token, { record: () => this.deps.runner.release(sessionId, token, turn.attempt, why), waitMs: SHUTDOWN_HAND_BACK_MS, log, onHandedBack: () => this.deps.onHandedBack?.('worker_shutdown') });
      }
      if (cause === 'cancelled' || (err instanceof StoreError && err.code === 'lease_lost')) {
        // The cancel (or a newer attempt) already wrote the turn's end; nothing of ours may be written.
        log.info('session turn stopped: cancelled or taken over');
        return { sessionId, outcome: 'cancelled' };
      }
      if (cause === 'lease_lost') throw new Error('lock lost', { cause: err });
      if (isRedisUnavailable(err)) return this.rideOutOutage(err as Error, job as Job<SessionTurnJobData>, token, turn.attempt, ac.signal, log);
      log.error({ err }, 'session turn failed');
      throw err;
    } finally {
      this.running.delete(job.id!);
      this.deps.cancels.unregister(sessionId, ac);
    }
  };

  /**
   * The turn's write found Redis unavailable: see rideOutOutage. A turn handed back resumes from its last boundary;
   * at the bound it ends in error, retryable, as a turn that lost its worker that often does.
   */
  private rideOutOutage(err: Error, job: Job<SessionTurnJobData>, lease: string, attempt: number, signal: AbortSignal, log: Logger): Promise<never> {
    const { sessionId, wake } = job.data;
    return rideOutOutage(job, lease, {
      err, maxAttempts: this.deps.maxAttempts, waitMs: this.deps.redisWaitMs, signal, log, onHandedBack: () => this.deps.onHandedBack?.('redis_unavailable'),
      release: (message) => this.deps.runner.release(sessionId, lease, attempt, { reason: 'redis_unavailable', message: `${message}; the turn resumes from its last boundary` }),
      giveUp: (message) => this.giveUpTurn({ sessionId, wake }, { code: 'redis_unavailable', message }),
    });
  }

  /**
   * Ends the turn of a job that is given up on (it met Redis outages or lost its worker too often, or failed with an
   * unexpected error) in a retryable error, if `wake` is still the session's turn (what was queued behind it starts
   * the next turn), and counts it with its duration; true if it ended it. The one give-up write for all of them, the
   * turn sweep's included.
   */
  async giveUpTurn({ sessionId, wake }: Pick<SessionTurnJobData, 'sessionId' | 'wake'>, error: { code: string; message: string }): Promise<boolean> {
    const ended = await this.deps.runner.giveUp(sessionId, wake, error);
    if (ended) this.deps.turns?.turnEnded({ outcome: 'error', ...turnSeconds(ended.started_at) });
    return ended !== null;
  }
}

/** BullMQ's stall check failed the job (it lost its worker more than maxStalledCount times), not its processor. */
export const failedByStallCheck = (failedReason: string): boolean => /stalled/i.test(failedReason);

/**
 * The error that ends a turn whose job BullMQ failed for good, by BullMQ's reason: written by the worker that saw
 * the job fail and, when that worker could not, by the turn sweep (TurnSweeper).
 */
export function failedTurnError(failedReason: string, maxAttempts: number): { code: string; message: string } {
  if (failedByStallCheck(failedReason)) return { code: 'worker_lost', message: `the turn lost its worker ${maxAttempts} times` };
  // The processor threw what it had no answer for (Redis refusing writes for want of memory, a bug). The error itself
  // is in the worker's log, not for the client.
  return { code: 'internal_error', message: 'the turn failed with an unexpected error; send the message again' };
}

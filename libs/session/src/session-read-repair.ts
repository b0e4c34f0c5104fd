import { scrubError, type Logger } from '@cadre/observability';
import type { SessionStatus } from '@cadre/protocol';
import { ThrottledChecks, type SessionStore } from '@cadre/store';
import type { SessionQueue } from './session-queue.ts';

/** Sessions whose last check a gateway remembers (the least recently checked are forgotten first). */
const TRACKED = 10_000;

export interface SessionReadRepairDeps {
  store: SessionStore;
  queue: SessionQueue;
  /** A running turn whose session has not changed for longer than this has stopped moving (CADRE_ENQUEUE_GRACE_MS). */
  graceMs: number;
  logger: Logger;
  /** Hears of each turn whose lost job it added again. */
  onRepaired?: () => void;
  tracked?: number;
}

/**
 * Read repair for session turns: a turn whose BullMQ job a failover lost leaves its session `running` with nothing
 * to run it (the turn sweep reads only BullMQ's failed set, the enqueue sweeper only marked changes), and every later
 * message is refused `turn_in_progress`. A client touching the session still finds it: when what was read for the
 * client says a turn is running and the session has not changed for longer than `graceMs` (each commit of a turn —
 * its streamed deltas, a tool's result, a boundary — moves its updated_at), the turn's job is looked for and, if it is gone, added again (SessionQueue.enqueueLostTurn, by the
 * turn's job id). A worker takes it and the turn resumes from its last boundary, as after a worker crash (a lease
 * left by a lost attempt is taken over: attempt_lost). Off the request's path (its errors are logged), at most once
 * per session per `graceMs` on this gateway. A moving session, an idle one, and a parked one (waiting on a client tool
 * or an approval: no job by design) cost nothing but the comparison.
 */
export class SessionReadRepair {
  private readonly deps: SessionReadRepairDeps;
  private readonly checks: ThrottledChecks;

  constructor(deps: SessionReadRepairDeps) {
    this.deps = deps;
    this.checks = new ThrottledChecks({
      periodMs: deps.graceMs, limit: deps.tracked ?? TRACKED, check: (sessionId) => this.repair(sessionId),
      onError: (sessionId, err) => deps.logger.warn({ sessionId, err: scrubError(err) }, 'could not repair a stuck session turn on read; a later read tries again'),
    });
  }

  /** A client read the session (its status and updated_at, ms, as just read); repairs its turn in the background if it is stuck. */
  seen(sessionId: string, status: SessionStatus, updatedMs: number): void {
    const now = Date.now();
    if (status === 'running' && now - updatedMs >= this.deps.graceMs) this.checks.run(sessionId, now);
  }

  /** A client's change was refused because a turn is in progress: nothing was read for it, so the check reads the session. */
  refused(sessionId: string): void {
    this.checks.run(sessionId);
  }

  /** No repair starts from now on (the gateway drains; one already started ends by itself). */
  stop(): void {
    this.checks.stop();
  }

  private async repair(sessionId: string): Promise<void> {
    const { store, queue, graceMs } = this.deps;
    const turn = await store.runningTurn(sessionId);
    if (!turn || Date.now() - turn.updated_ms < graceMs) return;
    // Still marked: its enqueue is the enqueue sweeper's (as the task read repair leaves a marked task).
    if (await store.beingEnqueued(sessionId)) return;
    // A job added for a wake the session has moved past meanwhile claims nothing (claimTurn: stale).
    if (!(await queue.enqueueLostTurn(sessionId, turn.wake))) return;
    this.deps.onRepaired?.();
    this.deps.logger.warn({ sessionId, wake: turn.wake }, 'added again the job of a stuck session turn a client touched: its BullMQ job was lost');
  }
}

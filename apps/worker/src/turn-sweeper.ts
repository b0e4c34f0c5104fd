import { repeatPass, type RepeatedPass } from '@cadre/lifecycle';
import { scrubError, type Logger } from '@cadre/observability';
import type { FailedSetCursor, FailedTurnJob, SessionQueue } from '@cadre/session';
import { StoreError, type SessionStore } from '@cadre/store';
import { failedTurnError } from './processors/session-job.processor.ts';

/** Failed jobs read per page, and at most per pass. */
const PAGE = 100;
const MAX_PER_PASS = 1_000;
/**
 * How far back each pass's look at the newest failures reaches before where the last one ended: jobs fail by their
 * worker's clock, so one may land behind a failure already read (hosts' clocks apart, or its write still on its way).
 */
const LATE_FAILURE_MS = 5_000;
const TOP: FailedSetCursor = { at: Infinity, skip: 0 };

export interface TurnSweeperDeps {
  queue: SessionQueue;
  store: SessionStore;
  /** Ends the turn in that error if `wake` is still the session's turn; true if it ended it (SessionJobProcessor.giveUpTurn). */
  endTurn: (turn: FailedTurnJob, error: { code: string; message: string }) => Promise<boolean>;
  /** For the worker_lost message: how many times the job lost its worker. */
  maxAttempts: number;
  intervalMs: number;
  logger: Logger;
  /** Hears of each turn a pass ended. */
  onEnded?: () => void;
  /** Failed jobs per read (100), at most per pass (1,000), and how far back the newest are looked for (5 s). */
  pageSize?: number;
  maxPerPass?: number;
  lateFailureMs?: number;
}

/**
 * Ends the turns whose job BullMQ failed for good but whose end was never written. The worker that sees the job fail
 * writes it (and retries a refused write for about ten minutes), but a worker that exits meanwhile, a Redis refusing
 * writes for longer, or one lost give-up after the stall check leaves the session `running` with no job left to end
 * it. BullMQ's failed set still names each such turn (session and wake) for a day (removeOnFail): every worker
 * process reads it at start and every `intervalMs`, a bounded number of jobs per pass, and ends a turn still at its
 * failed job's wake with the error the worker would have written. The write is cancelTurn fenced by that wake, so
 * sweeps in several processes, the failing worker's own retries and a newer turn of the session are safe: the others
 * write nothing.
 *
 * Each pass first reads the jobs that failed since the last pass (oldest first, from where it stopped), so a new
 * failure is reached by the next pass however many the set keeps; what is left of its bound goes on down the rest
 * of the set, newest first, from where the last pass left it, starting again at the newest once it reaches the end.
 */
export class TurnSweeper {
  private readonly deps: TurnSweeperDeps;
  private readonly pageSize: number;
  private readonly maxPerPass: number;
  private readonly lateFailureMs: number;
  private repeat: RepeatedPass | undefined;
  /** Where the next pass's read of the newest failures starts (towards newer); set by the first pass. */
  private recent: FailedSetCursor | undefined;
  /** Where the next pass's read of the rest starts (towards older). */
  private backlog: FailedSetCursor = TOP;

  constructor(deps: TurnSweeperDeps) {
    this.deps = deps;
    this.pageSize = deps.pageSize ?? PAGE;
    this.maxPerPass = deps.maxPerPass ?? MAX_PER_PASS;
    this.lateFailureMs = deps.lateFailureMs ?? LATE_FAILURE_MS;
  }

  start(): void {
    this.repeat = repeatPass(() => this.pass(), { intervalMs: this.deps.intervalMs, now: true });
  }

  /** Resolves once a pass in progress has settled. */
  stop(): Promise<void> {
    return this.repeat?.stop() ?? Promise.resolve();
  }

  /** One pass: how many failed jobs it read and how many turns it ended. */
  async sweep(): Promise<{ read: number; ended: number }> {
    const lookBackTo = Date.now() - this.lateFailureMs;
    // The first pass leaves what failed before it to the backlog.
    this.recent ??= { at: lookBackTo, skip: 0 };
    const tally = { read: 0, ended: 0 };
    // A cursor moves past a page only once its turns are handled: a pass that fails goes on from that page next time.
    const recent = await this.readOn(this.recent, 'newer', tally, (next) => (this.recent = next));
    // Caught up: the next pass looks again at what failed in the last lateFailureMs, for jobs landing behind it.
    if (recent.reachedEnd && this.recent.at > lookBackTo) this.recent = { at: lookBackTo, skip: 0 };
    const backlog = await this.readOn(this.backlog, 'older', tally, (next) => (this.backlog = next));
    if (backlog.reachedEnd) this.backlog = TOP;
    return tally;
  }

  /** Reads pages from `from` while the pass's bound allows; whether it reached that end of the failed set. */
  private async readOn(
    from: FailedSetCursor, direction: 'older' | 'newer', tally: { read: number; ended: number }, moved: (next: FailedSetCursor) => void,
  ): Promise<{ reachedEnd: boolean }> {
    let at = from;
    while (tally.read < this.maxPerPass) {
      const count = Math.min(this.pageSize, this.maxPerPass - tally.read);
      const page = await this.deps.queue.failedTurnsFrom(at, direction, count);
      for (const turn of page.turns) if (await this.endIfStranded(turn)) tally.ended++;
      tally.read += page.read;
      at = page.next;
      moved(at);
      if (page.read < count) return { reachedEnd: true };
    }
    return { reachedEnd: false };
  }

  private async endIfStranded(turn: FailedTurnJob): Promise<boolean> {
    const { queue, store, endTurn, maxAttempts, logger } = this.deps;
    // Most failed turns ended long ago: a read of the session rules them out without reading the job or writing.
    if (!(await store.turnInProgressAt(turn.sessionId, turn.wake))) return false;
    const failedReason = await queue.failedReasonOf(turn.jobId);
    if (failedReason === null) return false;
    const error = failedTurnError(failedReason, maxAttempts);
    try {
      if (!(await endTurn(turn, error))) return false;
    } catch (err) {
      // The session was closed or has expired meanwhile: nothing is left to end.
      if (err instanceof StoreError) return false;
      throw err;
    }
    this.deps.onEnded?.();
    logger.warn({ sessionId: turn.sessionId, wake: turn.wake, code: error.code }, 'ended a turn whose job had failed for good and whose end was never written');
    return true;
  }

  private async pass(): Promise<void> {
    try {
      const { read, ended } = await this.sweep();
      this.deps.logger.debug({ read, ended }, 'turn sweep pass');
    } catch (err) {
      this.deps.logger.warn({ err: scrubError(err) }, 'turn sweep failed; the next pass tries again');
    }
  }
}

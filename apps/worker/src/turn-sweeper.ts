import { repeatPass, type RepeatedPass } from '@cadre/lifecycle';
import { scrubError, type Logger } from '@cadre/observability';
import type { FailedTurnJob, SessionQueue } from '@cadre/session';
import { StoreError, type SessionStore } from '@cadre/store';
import { failedTurnError } from './processors/session-job.processor.ts';

/** Failed jobs read per page; a pass stops after MAX_PER_PASS of them and the next one goes on from there. */
const PAGE = 100;
const MAX_PER_PASS = 1_000;

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
}

/**
 * Ends the turns whose job BullMQ failed for good but whose end was never written. The worker that sees the job fail
 * writes it (and retries a refused write for about ten minutes), but a worker that exits meanwhile, a Redis refusing
 * writes for longer, or one lost give-up after the stall check leaves the session `running` with no job left to end
 * it. BullMQ's failed set still names each such turn (session and wake) for a day (removeOnFail): every worker
 * process reads it at start and every `intervalMs`, a bounded stretch per pass, and ends a turn still at its failed
 * job's wake with the error the worker would have written. The write is cancelTurn fenced by that wake, so sweeps in
 * several processes, the failing worker's own retries and a newer turn of the session are safe: the others write
 * nothing.
 */
export class TurnSweeper {
  private readonly deps: TurnSweeperDeps;
  private repeat: RepeatedPass | undefined;
  /** Where in the failed set (newest first) the next pass starts: 0 unless the last one stopped at its bound. */
  private resumeAt = 0;

  constructor(deps: TurnSweeperDeps) {
    this.deps = deps;
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
    let read = 0;
    let ended = 0;
    let at = this.resumeAt;
    try {
      while (read < MAX_PER_PASS) {
        const page = await this.deps.queue.failedTurns(at, PAGE);
        for (const turn of page.turns) if (await this.endIfStranded(turn)) ended++;
        read += page.read;
        at += page.read;
        if (page.read < PAGE) {
          at = 0;
          break;
        }
      }
    } finally {
      // A pass that failed goes on from its page next time; one that reached the end starts again from the newest.
      this.resumeAt = at;
    }
    return { read, ended };
  }

  private async endIfStranded(turn: FailedTurnJob): Promise<boolean> {
    const { store, endTurn, maxAttempts, logger } = this.deps;
    // Most failed turns ended long ago: a read rules them out without the give-up's writes.
    if (!(await store.turnInProgressAt(turn.sessionId, turn.wake))) return false;
    const error = failedTurnError(turn.failedReason, maxAttempts);
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

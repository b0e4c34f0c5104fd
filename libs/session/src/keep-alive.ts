import type { Logger } from '@cadre/observability';
import { StoreError, type SessionStore } from '@cadre/store';

/** setTimeout's longest delay: a longer one fires at once (a TTL above ~74 days would keep the keys every tick). */
const MAX_TIMER_MS = 2 ** 31 - 1;

export interface KeepAliveTarget {
  store: SessionStore;
  sessionId: string;
  /** The job run's lease: every keep is fenced by it. */
  lease: string;
  /** When the keys last got the idle TTL (TurnState.alive_from, Redis's clock). */
  aliveFrom: number;
  idleTtlSec: number;
  logger?: Logger;
}

/**
 * Keeps the session of a running turn alive for as long as one job run of it lasts: a third of the idle TTL after
 * its keys last got their expiry (the turn's start, a park, the last keep), and every third after, every key gets
 * the idle TTL from then (keepSessionAlive, fenced by the lease). A timer, not a check at the turn's step
 * boundaries: a single model call or tool run longer than the TTL would outlast the keys. A third, not a half: a
 * keep that fails (Redis slow or away) leaves another before the keys expire. One timer and no other Redis work: at
 * the default 7-day TTL it hardly ever fires. A lost lease (the turn ended, was cancelled or moved to another
 * attempt) or a vanished session stops it; the turn's own next write says so. Returns the stop, for the run's end.
 */
export function keepSessionAlive({ store, sessionId, lease, aliveFrom, idleTtlSec, logger }: KeepAliveTarget): () => void {
  // A session without an idle TTL has no keys to lose (and a zero period would spin).
  if (!(idleTtlSec > 0)) return () => undefined;
  const everyMs = (idleTtlSec * 1000) / 3;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let failureLogged = false;
  const schedule = (delayMs: number): void => {
    if (stopped) return;
    timer = setTimeout(keep, Math.min(Math.max(0, delayMs), MAX_TIMER_MS));
    timer.unref();
  };
  const keep = (): void => {
    store.keepSessionAlive(sessionId, lease).then(
      () => schedule(everyMs),
      (err: unknown) => {
        if (stopped || err instanceof StoreError) return;
        // Once per run: Redis away for long fails the turn's own writes too, and those are logged where handled.
        if (!failureLogged) logger?.warn({ err, sessionId }, 'could not keep the session alive; trying again');
        failureLogged = true;
        schedule(everyMs);
      },
    );
  };
  schedule(aliveFrom + everyMs - Date.now());
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

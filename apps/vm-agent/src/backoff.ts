/**
 * The wait before the retry after `failures` consecutive failures (1 = the first): `baseMs`·2^(failures−1),
 * jittered by ±10% so a fleet that lost its gateway together does not come back in step, and capped at `maxMs`.
 * The one backoff of the vm-agent: heartbeats, relayed events and the dispatch acknowledgement all use it.
 */
export function backoffDelay(failures: number, opts: { baseMs: number; maxMs: number; random?: () => number }): number {
  return Math.min(opts.maxMs, jittered(opts.baseMs * 2 ** Math.min(Math.max(failures, 1) - 1, 20), opts.random));
}

/** `ms` ±10%, at least 1. */
export function jittered(ms: number, random: () => number = Math.random): number {
  return Math.max(1, Math.round(ms * (0.9 + 0.2 * random())));
}

/**
 * A map that keeps at most `limit` entries, dropping the least recently used: for what a process may remember
 * because it never changes once known (a run's or a session's workspace), so the map spares a read without growing
 * with every id it has seen.
 */
export class RecentMap<K, V> {
  private readonly kept = new Map<K, V>();
  private readonly limit: number;

  constructor(limit: number) {
    this.limit = limit;
  }

  get(key: K): V | undefined {
    const value = this.kept.get(key);
    if (value !== undefined) this.set(key, value);
    return value;
  }

  set(key: K, value: V): void {
    // Deleted and set again: a Map iterates in insertion order, so its first key is the least recently used.
    this.kept.delete(key);
    this.kept.set(key, value);
    if (this.kept.size > this.limit) this.kept.delete(this.kept.keys().next().value!);
  }
}

/**
 * Read repair's background checks: `check(key)` started off the caller's path, at most once per key per `periodMs`
 * on this process (the last `limit` keys checked are remembered, so memory is bounded however many ids are read),
 * its failure handed to `onError`; none starts once stopped (one already started ends by itself).
 */
export class ThrottledChecks {
  private readonly opts: { periodMs: number; limit: number; check: (key: string) => Promise<void>; onError: (key: string, err: unknown) => void };
  /** When each key was last checked (ms). */
  private readonly lastChecked: RecentMap<string, number>;
  private stopped = false;

  constructor(opts: ThrottledChecks['opts']) {
    this.opts = opts;
    this.lastChecked = new RecentMap(opts.limit);
  }

  /** Starts a check of `key` unless one started within the period. */
  run(key: string, now = Date.now()): void {
    if (this.stopped) return;
    const last = this.lastChecked.get(key);
    if (last !== undefined && now - last < this.opts.periodMs) return;
    this.lastChecked.set(key, now);
    this.opts.check(key).catch((err: unknown) => this.opts.onError(key, err));
  }

  stop(): void {
    this.stopped = true;
  }
}

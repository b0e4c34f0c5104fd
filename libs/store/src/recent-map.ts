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

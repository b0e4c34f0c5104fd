/** A turn's duration for the TurnObserver: from its start (ms, as the store recorded it; 0 = unknown) to now. */
export function turnSeconds(startedAt: number): { seconds?: number } {
  return startedAt > 0 ? { seconds: Math.max(0, Date.now() - startedAt) / 1000 } : {};
}

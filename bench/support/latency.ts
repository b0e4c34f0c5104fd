export interface LatencySummary {
  samples: number;
  /** Samples expected but never seen (an event a reader did not receive). */
  missing: number;
  p50_ms: number;
  p99_ms: number;
  max_ms: number;
  mean_ms: number;
}

/** Percentiles over a sample array where NaN marks a sample that never arrived. */
export function summarize(samples: Float64Array): LatencySummary {
  const seen = samples.filter((x) => !Number.isNaN(x)).sort();
  const at = (p: number): number => (seen.length === 0 ? NaN : seen[Math.min(seen.length - 1, Math.ceil((p / 100) * seen.length) - 1)]!);
  const sum = seen.reduce((a, b) => a + b, 0);
  const r = (x: number): number => Math.round(x * 100) / 100;
  return {
    samples: seen.length,
    missing: samples.length - seen.length,
    p50_ms: r(at(50)),
    p99_ms: r(at(99)),
    max_ms: r(seen.length ? seen[seen.length - 1]! : NaN),
    mean_ms: r(seen.length ? sum / seen.length : NaN),
  };
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves once `cond()` holds, polling every `everyMs`; rejects with `what` after `timeoutMs`. */
export async function until(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 15_000, everyMs = 20): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await cond())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** Runs `f` over `items` with at most `width` at a time. */
export async function pool<T>(items: T[], width: number, f: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < items.length) await f(items[next++]!);
  }));
}

/**
 * Calls `send(i)` for i = 0..count-1 at `perSecond`, on a 1 ms timer: each tick sends every event due by then,
 * so the rate holds even when timers fire late. Returns the achieved rate.
 */
export async function paced(count: number, perSecond: number, send: (i: number) => void): Promise<number> {
  const start = performance.now();
  let i = 0;
  while (i < count) {
    const due = Math.min(count, Math.floor(((performance.now() - start) * perSecond) / 1000) + 1);
    for (; i < due; i++) send(i);
    if (i < count) await sleep(1);
  }
  return count / ((performance.now() - start) / 1000);
}

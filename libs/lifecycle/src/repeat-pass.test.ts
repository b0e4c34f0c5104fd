import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { repeatPass } from './repeat-pass.ts';

// Fake timers: time moves only when the test moves it, and vi.getTimerCount() counts the helper's own timers.
beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

/** A pass the test ends by hand: `started` counts the passes begun, `finish()` settles the latest. */
function manualPass(): { pass: () => Promise<void>; started: () => number; finish: (fail?: boolean) => Promise<void> } {
  let count = 0;
  let settle: ((fail: boolean) => void) | undefined;
  return {
    pass: () => {
      count++;
      return new Promise<void>((resolve, reject) => (settle = (fail) => (fail ? reject(new Error('pass failed')) : resolve())));
    },
    started: () => count,
    finish: async (fail = false) => {
      settle!(fail);
      await vi.advanceTimersByTimeAsync(0);
    },
  };
}

describe('repeatPass', () => {
  it('runs the next pass an interval after the last one settled, never two at once, a failed one included', async () => {
    const p = manualPass();
    const repeat = repeatPass(p.pass, { intervalMs: 1_000, now: true });
    expect(p.started()).toBe(1);
    // A pass longer than the interval: no second one starts beside it.
    await vi.advanceTimersByTimeAsync(5_000);
    expect(p.started()).toBe(1);
    await p.finish(true);
    await vi.advanceTimersByTimeAsync(999);
    expect(p.started()).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(p.started()).toBe(2);
    await p.finish();
    await repeat.stop();
    expect(vi.getTimerCount()).toBe(0);
  });

  it('waits one interval for the first pass without `now`', async () => {
    const p = manualPass();
    const repeat = repeatPass(p.pass, { intervalMs: 1_000 });
    expect(p.started()).toBe(0);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(p.started()).toBe(1);
    await p.finish();
    await repeat.stop();
  });

  it('stop() resolves once the pass in progress has settled, and no pass starts after it', async () => {
    const p = manualPass();
    const repeat = repeatPass(p.pass, { intervalMs: 1_000, now: true });
    let stopped = false;
    const stopping = repeat.stop().then(() => (stopped = true));
    await vi.advanceTimersByTimeAsync(0);
    expect(stopped).toBe(false);
    await p.finish();
    await stopping;
    await vi.advanceTimersByTimeAsync(10_000);
    expect(p.started()).toBe(1);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a pass that throws before returning a promise is dropped like a rejection: start() returns, the chain goes on', async () => {
    let started = 0;
    const throwing = (): Promise<void> => {
      started++;
      throw new Error('pass threw');
    };
    const repeat = repeatPass(throwing, { intervalMs: 1_000, now: true });
    await vi.advanceTimersByTimeAsync(0);
    expect(started).toBe(1);
    // In the timer too: the second pass throws there, and a third still follows it.
    await vi.advanceTimersByTimeAsync(2_000);
    expect(started).toBe(3);
    await repeat.stop();
    expect(vi.getTimerCount()).toBe(0);
  });
});

import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { writable } from './writable.ts';

/** More writers than Node's default of ten listeners per event, as a /ws socket with many conversations has. */
const WRITERS = 20;

const warnings: Error[] = [];
const onWarning = (warning: Error): number => warnings.push(warning);
process.on('warning', onWarning);
afterEach(() => {
  warnings.length = 0;
});

/** A stream its client does not read: the first write fills it, and it drains when `take` is called. */
function fullStream(): { stream: Writable; take: () => void } {
  let taken: (() => void) | undefined;
  const stream = new Writable({
    highWaterMark: 1,
    write(_chunk, _encoding, callback) {
      taken = callback;
    },
  });
  expect(stream.write('x')).toBe(false);
  return { stream, take: () => taken?.() };
}

/** A watcher's failure, as LogWatcher.onFailure reports it. */
function failingWatcher(): { watcher: { onFailure(listener: (error: Error) => void): () => void }; fail: () => void } {
  const listeners = new Set<(error: Error) => void>();
  return {
    watcher: {
      onFailure(listener) {
        listeners.add(listener);
        return () => listeners.delete(listener);
      },
    },
    fail: () => listeners.forEach((listener) => listener(new Error('fell behind'))),
  };
}

describe('writable (waiting for room in a full stream)', () => {
  it('many writers blocked on one stream share one drain listener: no MaxListeners warning, all resume on the drain', async () => {
    const { stream, take } = fullStream();
    const resumed: number[] = [];
    const waits = Array.from({ length: WRITERS }, (_, i) => writable(stream, 'close', { signal: new AbortController().signal }).then(() => resumed.push(i)));
    expect(stream.listenerCount('drain')).toBe(1);
    expect(stream.listenerCount('close')).toBe(1);

    take();
    await Promise.all(waits);
    expect(resumed).toHaveLength(WRITERS);
    // Let go of the stream once it drained; the warning (emitted on the next tick) never came.
    expect(stream.listenerCount('drain')).toBe(0);
    expect(stream.listenerCount('close')).toBe(0);
    await new Promise((resolve) => setImmediate(resolve));
    expect(warnings.map((w) => w.name)).not.toContain('MaxListenersExceededWarning');
  });

  it('a writer stops waiting when its signal aborts or its watcher fails; the others wait on for the drain', async () => {
    const { stream, take } = fullStream();
    const aborted = new AbortController();
    const { watcher, fail } = failingWatcher();
    const state: Record<string, boolean> = { aborted: false, failed: false, drained: false };
    const a = writable(stream, 'cancelled', { signal: aborted.signal }).then(() => (state.aborted = true));
    const b = writable(stream, 'cancelled', { watcher }).then(() => (state.failed = true));
    const c = writable(stream, 'cancelled').then(() => (state.drained = true));

    aborted.abort();
    await a;
    expect(state).toEqual({ aborted: true, failed: false, drained: false });
    fail();
    await b;
    expect(state).toEqual({ aborted: true, failed: true, drained: false });
    take();
    await c;
    expect(state.drained).toBe(true);
    // An aborted signal is not waited on at all.
    await writable(stream, 'cancelled', { signal: aborted.signal });
  });

  it('a stream that goes away releases its writers', async () => {
    const { stream } = fullStream();
    const waits = [writable(stream, 'close'), writable(stream, 'close')];
    stream.destroy();
    await Promise.all(waits);
    expect(stream.listenerCount('drain')).toBe(0);
  });
});

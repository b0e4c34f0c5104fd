import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { awaitWithin } from './await-within.ts';

/** A promise that never settles (a command queued for a Redis that is down, a close that hangs). */
const never = (): Promise<never> => new Promise<never>(() => undefined);
const LONG_MS = 3_600_000;

// Fake timers: vi.getTimerCount() counts the timers this test's code has pending (the helper's own, nothing else in
// the process), and time moves only when the test moves it.
beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('awaitWithin', () => {
  it('answers with the value of a promise that resolves in time, and clears its timer', async () => {
    const waiting = awaitWithin(Promise.resolve('PONG'), LONG_MS);
    expect(vi.getTimerCount()).toBe(1);
    expect(await waiting).toEqual({ value: 'PONG' });
    expect(vi.getTimerCount()).toBe(0);
    expect(await awaitWithin(Promise.resolve(undefined), LONG_MS)).toEqual({ value: undefined });
    expect(vi.getTimerCount()).toBe(0);
  });

  it('rejects with the rejection of a promise that rejects in time, and clears its timer', async () => {
    const refused = new Error('READONLY You can\'t write against a read only replica.');
    await expect(awaitWithin(Promise.reject(refused), LONG_MS)).rejects.toBe(refused);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('answers undefined for a promise that has not settled when the time is up, and not before', async () => {
    let answer: { value: never } | undefined | 'pending' = 'pending';
    const waiting = awaitWithin(never(), 10).then((a) => (answer = a));
    await vi.advanceTimersByTimeAsync(9);
    expect(answer).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    await waiting;
    expect(answer).toBeUndefined();
    expect(vi.getTimerCount()).toBe(0);
  });

  it('answers undefined once the signal aborts, or at once when it already has, and clears its timer', async () => {
    const ac = new AbortController();
    const waiting = awaitWithin(never(), LONG_MS, ac.signal);
    expect(vi.getTimerCount()).toBe(1);
    ac.abort();
    expect(await waiting).toBeUndefined();
    expect(vi.getTimerCount()).toBe(0);
    expect(await awaitWithin(never(), LONG_MS, AbortSignal.abort())).toBeUndefined();
    expect(vi.getTimerCount()).toBe(0);
  });

  it('leaves a rejection that comes after the time is up handled (vitest fails a test on an unhandled one)', async () => {
    let rejectLate!: (err: Error) => void;
    const late = new Promise<never>((_resolve, reject) => (rejectLate = reject));
    const waiting = awaitWithin(late, 1);
    await vi.advanceTimersByTimeAsync(1);
    expect(await waiting).toBeUndefined();
    rejectLate(new Error('Connection is closed.'));
    // Real timers again: a turn of the event loop, in which an unhandled rejection would be reported.
    vi.useRealTimers();
    await new Promise((resolve) => setImmediate(resolve));
  });
});

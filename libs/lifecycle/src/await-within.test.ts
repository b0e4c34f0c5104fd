import { describe, expect, it } from 'vitest';
import { awaitWithin } from './await-within.ts';

/** A promise that never settles (a command queued for a Redis that is down, a close that hangs). */
const never = (): Promise<never> => new Promise<never>(() => undefined);
const timers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
const LONG_MS = 3_600_000;

describe('awaitWithin', () => {
  it('answers with the value of a promise that resolves in time, and clears its timer', async () => {
    const before = timers();
    expect(await awaitWithin(Promise.resolve('PONG'), LONG_MS)).toEqual({ value: 'PONG' });
    expect(await awaitWithin(Promise.resolve(undefined), LONG_MS)).toEqual({ value: undefined });
    expect(timers()).toBe(before);
  });

  it('rejects with the rejection of a promise that rejects in time, and clears its timer', async () => {
    const before = timers();
    const refused = new Error('READONLY You can\'t write against a read only replica.');
    await expect(awaitWithin(Promise.reject(refused), LONG_MS)).rejects.toBe(refused);
    expect(timers()).toBe(before);
  });

  it('answers undefined for a promise that has not settled when the time is up', async () => {
    expect(await awaitWithin(never(), 10)).toBeUndefined();
  });

  it('answers undefined once the signal aborts, or at once when it already has', async () => {
    const before = timers();
    const ac = new AbortController();
    const waiting = awaitWithin(never(), LONG_MS, ac.signal);
    ac.abort();
    expect(await waiting).toBeUndefined();
    expect(await awaitWithin(never(), LONG_MS, AbortSignal.abort())).toBeUndefined();
    expect(timers()).toBe(before);
  });

  it('leaves a rejection that comes after the time is up handled (vitest fails a test on an unhandled one)', async () => {
    let rejectLate!: (err: Error) => void;
    const late = new Promise<never>((_resolve, reject) => (rejectLate = reject));
    expect(await awaitWithin(late, 1)).toBeUndefined();
    rejectLate(new Error('Connection is closed.'));
    await new Promise((resolve) => setImmediate(resolve));
  });
});

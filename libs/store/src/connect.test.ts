import { describe, expect, it } from 'vitest';
import { RedisNoAnswerError, isRedisUnavailable, retryWhileUnavailable } from './connect.ts';

/** A command sent to a dead single node: ioredis queues it until Redis is back, so it neither resolves nor rejects. */
const neverAnswered = (): Promise<never> => new Promise<never>(() => undefined);

describe('retryWhileUnavailable', () => {
  it('gives up on a try that is never answered once its time is spent, as on an unavailable reply', async () => {
    const err = await retryWhileUnavailable(neverAnswered, { withinMs: 50, everyMs: 10 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RedisNoAnswerError);
    expect(isRedisUnavailable(err)).toBe(true);
  });

  it('gives up on a try that is never answered when its signal aborts', async () => {
    const ac = new AbortController();
    const giving = retryWhileUnavailable(neverAnswered, { withinMs: 3_600_000, signal: ac.signal }).catch((e: unknown) => e);
    ac.abort();
    expect(await giving).toBeInstanceOf(RedisNoAnswerError);
  });

  it('still answers with the result of a try that comes back, and passes other failures through', async () => {
    expect(await retryWhileUnavailable(async () => 'OK', { withinMs: 1_000 })).toBe('OK');
    const wrongType = new Error('WRONGTYPE Operation against a key holding the wrong kind of value');
    await expect(retryWhileUnavailable(() => Promise.reject(wrongType), { withinMs: 1_000 })).rejects.toBe(wrongType);
  });
});

describe('isRedisUnavailable', () => {
  it('a bounded command given up on (its timeout) and credentials refused after a password rotation are unavailable', () => {
    expect(isRedisUnavailable(new Error('Command timed out'))).toBe(true);
    expect(isRedisUnavailable(new Error('NOAUTH Authentication required.'))).toBe(true);
    expect(isRedisUnavailable(new Error('WRONGPASS invalid username-password pair or user is disabled.'))).toBe(true);
    expect(isRedisUnavailable(new Error('NOPERM User cadre has no permissions to run the \'fcall\' command'))).toBe(false);
  });
});

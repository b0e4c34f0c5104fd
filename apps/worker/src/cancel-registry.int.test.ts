// The worker's cancel listener over a real Redis subscription: a cancel that names a session turn's lease stops that
// turn's loop only, so the turn its cancel started in the same script (follow-ups queued behind it, an abort's
// prompt) runs on in this worker even when its job began before the message arrived.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectRedis, type RedisClient } from '@cadre/store';
import { startTestRedis, waitUntil, type TestRedis } from '@cadre/testing';
import { CancelRegistry } from './cancel-registry.ts';

const CHANNEL = 'test:cancel';
let redis: TestRedis;
let subscriber: RedisClient;
let publisher: RedisClient;
const registry = new CancelRegistry(async () => false);

beforeAll(async () => {
  redis = await startTestRedis();
  subscriber = connectRedis(redis.url, 'test-cancel-subscriber');
  publisher = connectRedis(redis.url, 'test-cancel-publisher');
  await registry.listen({ subscriber, channel: CHANNEL, checkEveryMs: 60_000 });
});
afterAll(async () => {
  registry.stop();
  subscriber?.disconnect();
  publisher?.disconnect();
  await redis?.stop();
});

describe('cancel messages', () => {
  it('`<session> <lease>` aborts the loop of that lease only; `<session>` and `<task>` abort every loop of theirs', async () => {
    const ended = registry.register('session-1', async () => false, 'lease-ended');
    const next = registry.register('session-1', async () => false, 'lease-next');
    const task = registry.register('task-1');
    await publisher.publish(CHANNEL, 'session-1 lease-ended');
    // Messages on one channel arrive in order: once the task's is handled, so is the session's before it.
    await publisher.publish(CHANNEL, 'task-1');
    await waitUntil('the task loop to be aborted', async () => task.signal.aborted);
    expect(ended.signal.aborted).toBe(true);
    expect(next.signal.aborted).toBe(false);

    await publisher.publish(CHANNEL, 'session-1');
    await waitUntil('every loop of the session to be aborted', async () => next.signal.aborted);
    expect([ended.signal.reason, next.signal.reason, task.signal.reason]).toEqual(['cancelled', 'cancelled', 'cancelled']);
  });
});

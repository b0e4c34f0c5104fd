import { afterEach, expect, it } from 'vitest';
import { startRestartableRedis, waitUntil, type RestartableRedis } from '@cadre/testing';
import { connectRedis, endConnection, isRedisUnavailable, type RedisClient } from './connect.ts';

let redis: RestartableRedis | undefined;
let client: RedisClient | undefined;

afterEach(async () => {
  client?.disconnect();
  await redis?.stop();
});

it('endConnection rejects a command waiting for a killed Redis while the client waits to reconnect, and ends the client', async () => {
  redis = await startRestartableRedis();
  client = connectRedis(redis.target, 'cadre-end-connection-test');
  const connected = client;
  await connected.ping();
  redis.kill();
  // Sent while Redis is gone: queued until Redis is back (maxRetriesPerRequest: null), so pending for now.
  const pending = connected.set('k', 'v').then(() => 'answered', (err: Error) => err.message);
  await waitUntil('the client waits to reconnect', () => connected.status === 'reconnecting');
  endConnection(connected);
  expect(await pending).toBe('Connection is closed.');
  await waitUntil('the client ended', () => connected.status === 'end');
});

it('a bounded connection (boundedWait) fails a command sent while Redis is gone as unavailable, never sends it, and serves again once Redis is back', async () => {
  redis = await startRestartableRedis();
  client = connectRedis(redis.target, 'cadre-bounded-test', { boundedWait: true });
  const connected = client;
  await connected.ping();
  redis.kill();
  const err = await connected.set('bounded', 'sent').catch((e: unknown) => e);
  expect(err).toMatchObject({ name: 'MaxRetriesPerRequestError' });
  expect(isRedisUnavailable(err)).toBe(true);
  await redis.restart();
  await waitUntil('the client to answer again', () => connected.ping().catch(() => false));
  expect(await connected.get('bounded')).toBeNull();
});

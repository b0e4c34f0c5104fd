import { afterEach, expect, it } from 'vitest';
import { startRestartableRedis, waitUntil, type RestartableRedis } from '@cadre/testing';
import { connectRedis, endConnection, type RedisClient } from './connect.ts';

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

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestRedis, type TestRedis, type TestRedisClient } from '@cadre/testing';
import { KeyBuilder } from './keys.ts';
import { RunStore } from './run-store.ts';

let server: TestRedis;
let redis: TestRedisClient;
let store: RunStore;

beforeAll(async () => {
  server = await startTestRedis();
  redis = server.connect();
  store = new RunStore({ redis, keys: new KeyBuilder(`runs${process.pid}`) });
});
afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
});

/** Calls per command since the last CONFIG RESETSTAT (itself left out), from INFO commandstats; commands inside scripts count. */
async function commandCalls(): Promise<Record<string, number>> {
  const lines = (await redis.info('commandstats')).split('\n').filter((l) => l.startsWith('cmdstat_') && !l.startsWith('cmdstat_config'));
  return Object.fromEntries(lines.map((l) => [l.slice('cmdstat_'.length, l.indexOf(':')), Number(/calls=(\d+)/.exec(l)![1])]));
}

const beat = (workerId: string, acked: string[] | undefined) =>
  store.heartbeat({ workspace_id: 'ws-idle', worker_id: workerId, vm_id: 'vm', status: 'ready', metadata: {} }, acked);

describe('heartbeat', () => {
  // Every VM agent beats every few seconds whether or not there is work, so this is the fleet's standing cost.
  it.each([
    ['acking', [] as string[]],
    ['legacy (no acks)', undefined],
  ])('of an idle %s worker with nothing queued costs one script of seven commands', async (_kind, acked) => {
    await beat('idle-1', acked);
    await redis.config('RESETSTAT');
    const result = await beat('idle-1', acked);
    expect(result).toMatchObject({ assigned_run: null, control_commands: [], worker: { worker_id: 'idle-1', current_run_id: null } });
    // The script, its clock, the worker's read and write, the lease expiry scan, the queue and the commands list.
    expect(await commandCalls()).toEqual({ evalsha: 1, time: 1, hget: 1, hset: 1, zrangebyscore: 1, lpop: 1, lrange: 1 });
  });
});

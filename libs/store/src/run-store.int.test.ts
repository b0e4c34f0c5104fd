import { Redis } from 'ioredis';
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

/**
 * The connection whose counters see the workspace's scripts: the server, or on a cluster the master serving the
 * workspace's slot (each node counts only its own commands, and a keyless command goes to any node).
 */
async function countingNode(): Promise<Redis> {
  if (server.target.mode !== 'cluster') return new Redis(server.url);
  const slot = (await redis.call('CLUSTER', 'KEYSLOT', new KeyBuilder(`runs${process.pid}`).workspaceRuns('ws-idle').active)) as number;
  const shards = (await redis.call('CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
  const [, , [host, port]] = shards.find(([from, to]) => slot >= from && slot <= to)!;
  return new Redis({ host, port });
}

/**
 * Calls per command since the last CONFIG RESETSTAT, from INFO commandstats; commands inside scripts count. Left
 * out: the counting itself, and what cluster clients send any node for the topology (CLUSTER, PING, CLIENT).
 */
async function commandCalls(node: Redis): Promise<Record<string, number>> {
  const lines = (await node.info('commandstats')).split('\n').filter((l) => l.startsWith('cmdstat_') && !/^cmdstat_(config|info|cluster|ping|client)\b/.test(l));
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
    const node = await countingNode();
    try {
      await node.config('RESETSTAT');
      const result = await beat('idle-1', acked);
      expect(result).toMatchObject({ assigned_run: null, control_commands: [], worker: { worker_id: 'idle-1', current_run_id: null } });
      // The script, its clock, the worker's read and write, the lease expiry scan, the queue and the commands list.
      expect(await commandCalls(node)).toEqual({ fcall: 1, time: 1, hget: 1, hset: 1, zrangebyscore: 1, lpop: 1, lrange: 1 });
    } finally {
      node.disconnect();
    }
  });
});

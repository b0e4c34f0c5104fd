import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddedRedis, type EmbeddedRedis } from '@cadre/embedded-redis';
import { runsCall } from '@cadre/testing';
import { gatewayConfig } from '../apps/gateway/src/config.ts';
import { startGateway, type Gateway } from '../apps/gateway/src/gateway.ts';

const RUNS_KEY = 'unix-socket-runs-key';
let dir: string;
let redis: EmbeddedRedis;
let gateway: Gateway;

// A co-located Redis reached over a Unix socket (REDIS_URL=unix:///path): no TCP stack between the gateway and Redis.
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'cadre-sock-'));
  const socket = join(dir, 'redis.sock');
  redis = await startEmbeddedRedis({ extraArgs: ['--unixsocket', socket, '--unixsocketperm', '700'] });
  const config = gatewayConfig({ REDIS_URL: `unix://${socket}`, RUNS_API_KEY: RUNS_KEY, CADRE_KEY_PREFIX: 'sock', PORT: '0', HOST: '127.0.0.1' });
  expect(config.redis).toEqual({ mode: 'single', url: `unix://${socket}` });
  gateway = await startGateway({ ...config, redis: config.redis! }, pino({ level: 'silent' }));
});
afterAll(async () => {
  await gateway?.close();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('REDIS_URL=unix:///path', () => {
  it('serves the runs API with every gateway connection on the socket', async () => {
    const url = `http://127.0.0.1:${gateway.port}`;
    const created = await runsCall(url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: 'ws-sock', query: 'over the socket' });
    expect(created.status).toBe(200);
    const hb = await runsCall(url, RUNS_KEY, 'POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-sock', worker_id: 'vm', status: 'ready' });
    expect(hb.status).toBe(200);
    expect(hb.body.assigned_run).toMatchObject({ run_id: created.body.run.run_id, query: 'over the socket' });

    // Redis marks a client on a Unix socket with the flag U; this test's own client comes over TCP.
    const admin = new Redis(redis.url);
    try {
      const clients = (await admin.client('LIST') as string).split('\n').filter((line) => / name=cadre-gateway/.test(line));
      const byName = Object.fromEntries(clients.map((line) => [/ name=(\S+)/.exec(line)![1], /\bflags=(\S+)/.exec(line)![1]]));
      expect(Object.keys(byName)).toEqual(expect.arrayContaining(['cadre-gateway', 'cadre-gateway-heartbeats', 'cadre-gateway-queue', 'cadre-gateway-sub']));
      for (const flags of Object.values(byName)) expect(flags).toContain('U');
    } finally {
      admin.disconnect();
    }
  });
});

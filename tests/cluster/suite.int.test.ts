// The cluster suite's own check that it runs where it claims to: every other file of `npm run test:cluster` gets
// this Redis from startTestRedis().
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestRedis, type TestRedis, type TestRedisClient } from '@cadre/testing';

let server: TestRedis;
let redis: TestRedisClient;
beforeAll(async () => {
  server = await startTestRedis();
  redis = server.connect();
});
afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
});

describe('npm run test:cluster', () => {
  it('hands every test file a Redis Cluster of three masters, each with a replica', async () => {
    expect(server.target.mode).toBe('cluster');
    const info = (await redis.call('CLUSTER', 'INFO')) as string;
    expect(info).toMatch(/^cluster_state:ok\r?$/m);
    expect(info).toMatch(/^cluster_size:3\r?$/m);
    expect(info).toMatch(/^cluster_known_nodes:6\r?$/m);
  });
});

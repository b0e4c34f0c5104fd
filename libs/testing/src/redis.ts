import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Cluster, Redis } from 'ioredis';
import type { RedisTarget } from '@cadre/config';
import { startEmbeddedRedis } from '@cadre/embedded-redis';

/** A test's own client: `Redis` on one node, `Cluster` under the cluster suite (they take the same commands). */
export type TestRedisClient = Redis | Cluster;

export interface TestRedis {
  /** A URL of the server (on a cluster: of one node; use connect() or target to reach the whole cluster). */
  url: string;
  /** Where the server is, as the apps' configuration would name it. */
  target: RedisTarget;
  /** The variables a Cadre process is pointed at this Redis with (REDIS_URL, or REDIS_CLUSTER_NODES on a cluster). */
  env: Record<string, string>;
  /** A client for the test's own reads and writes: a Cluster client when the suite runs on a cluster. */
  connect(): TestRedisClient;
  /** kill -9 the server (embedded only), for crash tests. */
  kill?(): void;
  stop(): Promise<void>;
}

/**
 * Set (to `host:port,...`) by the cluster suite's global setup (tests/support/cluster-setup.ts): every test file
 * of `npm run test:cluster` then shares one local Redis Cluster, each with its own key prefix.
 */
export const TEST_CLUSTER_ENV = 'CADRE_TEST_REDIS_CLUSTER';

let warnedFallback = false;

/**
 * A private Redis for one test file: a testcontainers Redis where a Docker engine is reachable, else a
 * redis-server child on a free port. Never the machine's shared Redis. Under `npm run test:cluster`, the suite's
 * local Redis Cluster instead (shared by the files, stopped by the suite).
 */
export async function startTestRedis(): Promise<TestRedis> {
  const seeds = process.env[TEST_CLUSTER_ENV];
  if (seeds) return sharedCluster(seeds);
  if (process.env.DOCKER_HOST || existsSync('/var/run/docker.sock')) {
    try {
      const { RedisContainer } = await import('@testcontainers/redis');
      const container = await new RedisContainer('redis:7-alpine').start();
      return single(container.getConnectionUrl(), { stop: async () => void (await container.stop()) });
    } catch (err) {
      // A socket without a working engine (as on this project's CI machines): fall back to redis-server, and say
      // why once per process rather than on every test file's start.
      if (!warnedFallback) {
        warnedFallback = true;
        const where = process.env.DOCKER_HOST ?? '/var/run/docker.sock';
        process.stderr.write(`@cadre/testing: testcontainers Redis did not start via ${where} (${err instanceof Error ? err.message.split('\n')[0] : String(err)}); using a redis-server child instead\n`);
      }
    }
  }
  const redis = await startEmbeddedRedis();
  return single(redis.url, { kill: () => redis.kill('SIGKILL'), stop: () => redis.stop() });
}

/** A single-node Redis whose outages a test makes: it keeps every acknowledged write across kill() and restart(). */
export interface RestartableRedis extends TestRedis {
  kill(): void;
  /** Starts the server again on the same port with the same data (it comes back a master). */
  restart(): Promise<void>;
}

/**
 * A redis-server child with an append-only file fsynced on every write, for outage tests (always one node, also
 * under the cluster suite): kill -9 it, or demote it to a replica, and bring it back with its data.
 */
export async function startRestartableRedis(): Promise<RestartableRedis> {
  // Our own data dir: a persistent server's default one would outlive the test.
  const dataDir = mkdtempSync(join(tmpdir(), 'cadre-outage-redis-'));
  const redis = await startEmbeddedRedis({ persist: true, dataDir });
  const stop = async (): Promise<void> => {
    await redis.stop();
    rmSync(dataDir, { recursive: true, force: true });
  };
  return { ...single(redis.url, { stop }), kill: () => redis.kill('SIGKILL'), restart: () => redis.restart() };
}

function single(url: string, how: Pick<TestRedis, 'stop' | 'kill'>): TestRedis {
  return { url, target: { mode: 'single', url }, env: { REDIS_URL: url }, connect: () => new Redis(url), ...how };
}

function sharedCluster(seeds: string): TestRedis {
  const nodes = seeds.split(',').map((s) => ({ host: s.slice(0, s.lastIndexOf(':')), port: Number(s.slice(s.lastIndexOf(':') + 1)) }));
  return {
    url: `redis://${nodes[0]!.host}:${nodes[0]!.port}`,
    target: { mode: 'cluster', nodes, tls: false },
    env: { REDIS_CLUSTER_NODES: seeds },
    connect: () => new Cluster(nodes, { redisOptions: { maxRetriesPerRequest: null } }),
    // The suite's global teardown stops the cluster.
    stop: async () => undefined,
  };
}

import { existsSync } from 'node:fs';
import type { RedisTarget } from '@cadre/config';
import { startEmbeddedRedis } from '@cadre/embedded-redis';

export interface TestRedis {
  url: string;
  /** Where the server is, as the apps' configuration would name it. */
  target: RedisTarget;
  /** kill -9 the server (embedded only), for crash tests. */
  kill?(): void;
  stop(): Promise<void>;
}

let warnedFallback = false;

/**
 * A private Redis for one test file: a testcontainers Redis where a Docker engine is reachable, else a
 * redis-server child on a free port. Never the machine's shared Redis.
 */
export async function startTestRedis(): Promise<TestRedis> {
  if (process.env.DOCKER_HOST || existsSync('/var/run/docker.sock')) {
    try {
      const { RedisContainer } = await import('@testcontainers/redis');
      const container = await new RedisContainer('redis:7-alpine').start();
      const url = container.getConnectionUrl();
      return { url, target: { mode: 'single', url }, stop: async () => void (await container.stop()) };
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
  return { url: redis.url, target: { mode: 'single', url: redis.url }, kill: () => redis.kill('SIGKILL'), stop: () => redis.stop() };
}

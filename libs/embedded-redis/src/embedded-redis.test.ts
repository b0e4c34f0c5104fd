import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { findFreePort, startEmbeddedRedis, stopLeftoverRedis } from './index.ts';
import type { EmbeddedRedis } from './index.ts';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

async function started(opts: Parameters<typeof startEmbeddedRedis>[0] = {}): Promise<EmbeddedRedis> {
  const redis = await startEmbeddedRedis(opts);
  cleanups.push(() => redis.stop());
  return redis;
}

function client(url: string): Redis {
  const c = new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: true });
  cleanups.push(() => void c.disconnect());
  return c;
}

function portIsOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ host: '127.0.0.1', port });
    s.once('connect', () => { s.destroy(); resolve(true); });
    s.once('error', () => resolve(false));
  });
}

// An exited child whose parent is gone can linger as a zombie when PID 1 does not reap (some containers).
function isAlive(pid: number): boolean {
  if (process.platform === 'linux') {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
    } catch {
      return false;
    }
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('startEmbeddedRedis', () => {
  it('serves SET/GET on 127.0.0.1 and closes the port on stop()', async () => {
    const redis = await started();
    expect(isAlive(redis.pid)).toBe(true);
    expect(redis.url).toBe(`redis://127.0.0.1:${redis.port}`);

    const c = client(redis.url);
    await c.set('greeting', 'hello');
    expect(await c.get('greeting')).toBe('hello');
    c.disconnect();

    await redis.stop();
    expect(await portIsOpen(redis.port)).toBe(false);
    expect(isAlive(redis.pid)).toBe(false);
    expect(existsSync(redis.dataDir)).toBe(false);
  });

  it('uses the requested port', async () => {
    const port = await findFreePort();
    const redis = await started({ port });
    expect(redis.port).toBe(port);
    expect(await client(redis.url).ping()).toBe('PONG');
  });

  it('reports the server output when the requested port is taken', async () => {
    const first = await started();
    await expect(startEmbeddedRedis({ port: first.port })).rejects.toThrow(/address already in use/i);
  });

  it('with persist, keeps acknowledged writes across SIGKILL and restart() on the same port', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cadre-redis-test-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const redis = await started({ dataDir, persist: true });
    const { port, pid } = redis;

    const before = client(redis.url);
    await before.set('task:1', 'queued');
    await before.rpush('events', 'a', 'b');
    before.disconnect();

    redis.kill('SIGKILL');
    await redis.restart();
    expect(redis.port).toBe(port);
    expect(redis.pid).not.toBe(pid);

    const after = client(redis.url);
    expect(await after.get('task:1')).toBe('queued');
    expect(await after.lrange('events', 0, -1)).toEqual(['a', 'b']);
  });

  it('says how to get redis-server when the binary is missing', async () => {
    const attempt = startEmbeddedRedis({ binary: 'redis-server-that-does-not-exist' });
    await expect(attempt).rejects.toThrow(/apt-get install redis-server/);
    await expect(attempt).rejects.toThrow(/brew install redis/);
    await expect(attempt).rejects.toThrow(/REDIS_URL/);
  });

  it('kills the server and removes its temp dir when the parent process exits', async () => {
    // A separate Node process starts redis and exits without calling stop().
    const script = `
      const { startEmbeddedRedis } = await import(${JSON.stringify(new URL('./index.ts', import.meta.url).href)});
      const r = await startEmbeddedRedis();
      console.log(JSON.stringify({ pid: r.pid, dataDir: r.dataDir }));
      process.exit(0);
    `;
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script]);
    const { pid, dataDir } = JSON.parse(stdout.trim()) as { pid: number; dataDir: string };

    // Not the port: once freed, a test running beside this one may start its own redis-server on it.
    for (let i = 0; i < 250 && (isAlive(pid) || existsSync(dataDir)); i++) await new Promise((r) => setTimeout(r, 20));
    expect(isAlive(pid)).toBe(false);
    expect(existsSync(dataDir)).toBe(false);
  });
});

describe('stopLeftoverRedis', () => {
  async function persisted(): Promise<EmbeddedRedis> {
    const dataDir = mkdtempSync(join(tmpdir(), 'cadre-redis-test-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    return started({ dataDir, persist: true });
  }

  it('stops the server on the data dir, which keeps what it had', async () => {
    const redis = await persisted();
    const { pid, port, dataDir } = redis;
    const before = client(redis.url);
    await before.set('task:1', 'queued');
    before.disconnect();

    expect(await stopLeftoverRedis({ pid, port, dataDir })).toBe('stopped');
    expect(isAlive(pid)).toBe(false);
    await redis.restart();
    expect(await client(redis.url).get('task:1')).toBe('queued');
  });

  it('leaves a server on another dir, and a process that is not the server (a reused pid), running', async () => {
    const redis = await persisted();
    const other = await persisted();
    expect(await stopLeftoverRedis({ pid: redis.pid, port: redis.port, dataDir: other.dataDir })).toBe('not-running');
    expect(await stopLeftoverRedis({ pid: process.pid, port: redis.port, dataDir: redis.dataDir })).toBe('not-running');
    expect(await stopLeftoverRedis({ pid: other.pid, port: redis.port, dataDir: other.dataDir })).toBe('not-running');
    expect(isAlive(redis.pid) && isAlive(other.pid)).toBe(true);
    expect(await client(redis.url).ping()).toBe('PONG');
  });
});

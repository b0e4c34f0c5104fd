// A gateway or worker started before its Redis (or pointed at a wrong one) waits for it, and says so: a warn line
// naming the variable, where it points (password redacted) and why, rather than nothing at all while its port stays
// closed. Once a Redis answers there, it starts as usual.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { startEmbeddedRedis, type EmbeddedRedis } from '@cadre/embedded-redis';
import { TEST_API_KEY, waitUntil } from '@cadre/testing';
import { freePort } from './support/stack.ts';

const REPO = fileURLToPath(new URL('../', import.meta.url));
const PASSWORD = 's3cretPW-unreachable';

let children: ChildProcess[] = [];
let redis: EmbeddedRedis | undefined;
afterEach(async () => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  children = [];
  await redis?.stop();
  redis = undefined;
});

/** An app as a real process, with everything it prints (stdout and stderr) collected. */
function spawnApp(entry: string, env: Record<string, string>): { child: ChildProcess; output: () => string } {
  const clean: Record<string, string | undefined> = { ...process.env };
  for (const name of Object.keys(clean)) if (/^(REDIS_|CADRE_|RUNS_|OPENAI_|WORKER|PORT$|HOST$|LOG_LEVEL$)/.test(name)) delete clean[name];
  const child = spawn(process.execPath, [entry], { cwd: REPO, env: { ...clean, LOG_LEVEL: 'info', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  return { child, output: () => out };
}

describe('Redis not reachable at start', () => {
  it('gateway and worker say so (REDIS_URL, the target without its password, ECONNREFUSED), then start once Redis is there', async () => {
    const redisPort = await freePort();
    const gatewayPort = await freePort();
    const redisUrl = `redis://cadre:${PASSWORD}@127.0.0.1:${redisPort}`;
    const shown = `REDIS_URL: cannot reach redis://cadre:***@127.0.0.1:${redisPort} (ECONNREFUSED); retrying`;
    const gateway = spawnApp('apps/gateway/src/main.ts', { REDIS_URL: redisUrl, PORT: String(gatewayPort), HOST: '127.0.0.1', CADRE_API_KEY: TEST_API_KEY });
    const worker = spawnApp('apps/worker/src/main.ts', {
      REDIS_URL: redisUrl, OPENAI_BASE_URL: 'http://127.0.0.1:1/v1', OPENAI_API_KEY: 'x', WORKER_METRICS_PORT: String(await freePort()), WORKER_METRICS_HOST: '127.0.0.1',
    });

    for (const app of [gateway, worker]) {
      await waitUntil('the line saying Redis cannot be reached', () => app.output().includes(shown), { timeoutMs: 10_000 });
      const line = app.output().split('\n').find((l) => l.includes(shown))!;
      expect(JSON.parse(line)).toMatchObject({ level: 40, msg: shown });
      expect(app.output()).not.toContain(PASSWORD);
      expect(app.child.exitCode).toBeNull();
    }

    // Still waiting, not given up: a Redis that turns up on that port is used (its user `cadre` has the password; the
    // default user none, for the helper's PING).
    redis = await startEmbeddedRedis({ port: redisPort, extraArgs: ['--user', 'cadre', 'on', `>${PASSWORD}`, '~*', '&*', '+@all'] });
    await waitUntil('the gateway to listen', () => gateway.output().includes('gateway listening'));
    const ready = await fetch(`http://127.0.0.1:${gatewayPort}/readyz`);
    expect(ready.status).toBe(200);
    await waitUntil('the worker pool to be ready', () => worker.output().includes('worker pool ready'));
    expect(gateway.output() + worker.output()).not.toContain(PASSWORD);
  }, 60_000);
});

// Every app answers bad configuration the same way: one line per problem on stderr naming the variable and what
// it accepts, no stack trace, exit code 1 — for a bad value, a missing one, a port that is taken, and a Redis user
// that may not run the store's functions.
import { spawn } from 'node:child_process';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestRedis, type TestRedis } from '@cadre/testing';

const REPO = fileURLToPath(new URL('../', import.meta.url));
const LEVELS = 'expected one of fatal, error, warn, info, debug, trace, silent, got "verbose"';

/** The environment without anything of the developer's that would configure an app. */
function cleanEnv(extra: Record<string, string>): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = { ...process.env };
  for (const name of Object.keys(env)) {
    if (/^(REDIS_|OPENAI_|CADRE_|RUNS_|WINDIE_|VM_AGENT|WORKER|PORT$|HOST$|LOG_LEVEL$|OTEL_)/.test(name)) delete env[name];
  }
  return { ...env, ...extra };
}

async function run(entry: string, env: Record<string, string>, args: string[] = []): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [entry, ...args], { cwd: REPO, env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  return { code, stdout, stderr };
}

/** Exit code 1 (the CLI: 2, its usage code) and exactly these lines on stderr (no stack trace, no JSON log). */
function expectRefused(result: { code: number | null; stderr: string }, lines: Array<string | RegExp>, exitCode = 1): void {
  expect(result.code, result.stderr).toBe(exitCode);
  const got = result.stderr.trimEnd().split('\n');
  expect(got).toHaveLength(lines.length);
  lines.forEach((line, i) => (typeof line === 'string' ? expect(got[i]).toBe(line) : expect(got[i]).toMatch(line)));
}

let redis: TestRedis;
let taken: net.Server;
let takenPort: number;
beforeAll(async () => {
  redis = await startTestRedis();
  taken = net.createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
  takenPort = (taken.address() as net.AddressInfo).port;
});
afterAll(async () => {
  await new Promise((resolve) => taken?.close(resolve));
  await redis?.stop();
});

const GATEWAY = 'apps/gateway/src/main.ts';
const WORKER = 'apps/worker/src/main.ts';
const VM_AGENT = 'apps/vm-agent/src/main.ts';
const STACK = 'apps/stack/src/main.ts';
const MODEL = 'libs/scripted-model/src/main.ts';

describe('bad configuration: one clear line per problem, exit 1', () => {
  it('LOG_LEVEL=verbose, in every app', async () => {
    const [gateway, worker, vmAgent, stack] = await Promise.all(
      [GATEWAY, WORKER, VM_AGENT, STACK].map((entry) => run(entry, { LOG_LEVEL: 'verbose' })),
    );
    expectRefused(gateway!, [`gateway: LOG_LEVEL: ${LEVELS}`]);
    expectRefused(worker!, [`worker: LOG_LEVEL: ${LEVELS}`]);
    expectRefused(vmAgent!, [`vm-agent: LOG_LEVEL: ${LEVELS}`]);
    expectRefused(stack!, [`npm start: LOG_LEVEL: ${LEVELS}`]);
  });

  it('Redis: exactly one of REDIS_URL, REDIS_CLUSTER_NODES, REDIS_SENTINELS, each well formed', async () => {
    const [both, badNodes, noName] = await Promise.all([
      run(GATEWAY, { REDIS_URL: redis.url, REDIS_CLUSTER_NODES: '127.0.0.1:7000' }),
      run(WORKER, { REDIS_CLUSTER_NODES: '127.0.0.1:7000,redis-1', OPENAI_BASE_URL: 'http://127.0.0.1:1/v1', OPENAI_API_KEY: 'x' }),
      run(GATEWAY, { REDIS_SENTINELS: 'sentinel-0:26379', REDIS_PASSWORD: 'hunter2' }),
    ]);
    expectRefused(both!, ['gateway: REDIS_URL: set only one of REDIS_URL (one node), REDIS_CLUSTER_NODES (a cluster) or REDIS_SENTINELS (Sentinel); found REDIS_URL and REDIS_CLUSTER_NODES']);
    expectRefused(badNodes!, ['worker: REDIS_CLUSTER_NODES: expected host:port entries separated by commas, got "redis-1"']);
    expectRefused(noName!, ['gateway: REDIS_SENTINELS: REDIS_SENTINEL_NAME is required with REDIS_SENTINELS: the name of the master the sentinels watch (e.g. mymaster)']);
    expect(noName!.stderr).not.toContain('hunter2');
  });

  it('bad and missing values: every problem at once, each naming its variable', async () => {
    const [worker, gateway, vmAgent, missing, model, cli] = await Promise.all([
      run(WORKER, { WORKER_CONCURRENCY: 'lots', CADRE_MAX_TURNS: '0' }),
      run(GATEWAY, { REDIS_URL: redis.url, CADRE_GRPC_MAX_CONCURRENT_STREAMS: '0' }),
      run(VM_AGENT, { CADRE_GATEWAY_URL: 'not a url' }),
      run(WORKER, {}),
      run(MODEL, { PORT: '99999' }),
      run('apps/cli/src/main.ts', { CADRE_URL: 'not a url' }, ['status']),
    ]);
    expectRefused(worker!, ['worker: WORKER_CONCURRENCY: expected an integer, got "lots"', 'worker: CADRE_MAX_TURNS: must be >= 1, got 0']);
    expectRefused(gateway!, ['gateway: CADRE_GRPC_MAX_CONCURRENT_STREAMS: must be >= 1, got 0']);
    expectRefused(vmAgent!, [/^vm-agent: CADRE_GATEWAY_URL: expected a URL \(scheme:\/\/host:port\)/]);
    expectRefused(missing!, [/^worker: REDIS_URL: required: /, /^worker: OPENAI_BASE_URL: required: /, /^worker: OPENAI_API_KEY: required: /]);
    expectRefused(model!, ['model: PORT: must be <= 65535, got 99999']);
    expectRefused(cli!, [/^cadre: CADRE_URL: expected a URL \(scheme:\/\/host:port\)/], 2);
  });

  it('a port in use: gateway, npm start and the scripted model name PORT', async () => {
    const inUse = `PORT: port ${takenPort} is already in use on 127.0.0.1; stop what listens there or choose another PORT (0 picks a free one)`;
    const [gateway, stack, model] = await Promise.all([
      run(GATEWAY, { PORT: String(takenPort), HOST: '127.0.0.1', REDIS_URL: redis.url, CADRE_DEV_MODE: 'true', CADRE_KEY_PREFIX: 'bad-config' }),
      run(STACK, { PORT: String(takenPort), HOST: '127.0.0.1' }),
      run(MODEL, { PORT: String(takenPort), HOST: '127.0.0.1' }),
    ]);
    expectRefused(gateway!, [`gateway: ${inUse}`]);
    expectRefused(stack!, [`npm start: ${inUse}`]);
    expectRefused(model!, [`model: ${inUse}`]);
    // npm start stopped before starting anything: nothing of it was printed.
    expect(stack!.stdout).toBe('');
  });

  it('a Redis user whose ACL predates the Functions library: gateway and worker name the ACL it needs', async () => {
    const admin = new Redis(redis.url);
    const password = `pw-${randomUUID()}`;
    const url = new URL(redis.url);
    const userUrl = (user: string) => `redis://${user}:${password}@${url.host}`;
    const needs = "Cadre's store is a Redis Functions library, so the user needs +fcall +function|load (ACL SETUSER <user> +fcall +function|load)";
    try {
      // The previous release's: scripts by EVAL / EVALSHA only. And one that may load the library but not call it.
      await admin.call('ACL', 'SETUSER', 'cadre-evalonly', 'on', `>${password}`, '~*', '&*', '+@all', '-fcall', '-fcall_ro', '-function');
      await admin.call('ACL', 'SETUSER', 'cadre-nofcall', 'on', `>${password}`, '~*', '&*', '+@all', '-fcall', '-fcall_ro');
      const [gateway, worker] = await Promise.all([
        run(GATEWAY, { REDIS_URL: userUrl('cadre-evalonly'), PORT: '0', HOST: '127.0.0.1', CADRE_DEV_MODE: 'true', CADRE_KEY_PREFIX: 'bad-config' }),
        run(WORKER, { REDIS_URL: userUrl('cadre-nofcall'), OPENAI_BASE_URL: 'http://127.0.0.1:1/v1', OPENAI_API_KEY: 'x', CADRE_KEY_PREFIX: 'bad-config' }),
      ]);
      expectRefused(gateway!, [`gateway: REDIS_URL: the Redis user may not run 'function|load' (NOPERM): ${needs}`]);
      expectRefused(worker!, [`worker: REDIS_URL: the Redis user may not run 'fcall' (NOPERM): ${needs}`]);
      for (const result of [gateway!, worker!]) expect(result.stdout + result.stderr).not.toContain(password);
    } finally {
      await admin.call('ACL', 'DELUSER', 'cadre-evalonly', 'cadre-nofcall').catch(() => undefined);
      await admin.quit().catch(() => undefined);
    }
  });
});

// Every app answers bad configuration the same way: one line per problem on stderr naming the variable and what
// it accepts, no stack trace, exit code 1 — for a bad value, a missing one, a port that is taken, a Redis user
// that may not run the store's functions, a database Redis does not have, and a workdir the vm-agent cannot use.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestRedis, startTestSentinel, type TestRedis } from '@cadre/testing';

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
const CLI = 'apps/cli/src/main.ts';
/** What a worker or vm-agent needs besides the variable under test (nothing listens on port 1). */
const MODEL_ENV = { OPENAI_BASE_URL: 'http://127.0.0.1:1/v1', OPENAI_API_KEY: 'x' };
const HTTP_SCHEMES = 'expected a URL starting http:// or https://';
const DB_RANGE = 'a database number: 0 or more, below the server\'s "databases" setting (16 by default: 0 to 15)';

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
      run(CLI, { CADRE_URL: 'not a url' }, ['status']),
    ]);
    expectRefused(worker!, ['worker: WORKER_CONCURRENCY: expected an integer in decimal digits, got "lots"', 'worker: CADRE_MAX_TURNS: must be >= 1, got 0']);
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
  it('URL variables take only the schemes their clients speak: a value without one is refused, not failed on every call', async () => {
    const [vmAgent, worker, gateway, stack, cli] = await Promise.all([
      run(VM_AGENT, { CADRE_GATEWAY_URL: 'gateway:8080', RUNS_API_KEY: 'k', ...MODEL_ENV }),
      run(WORKER, { REDIS_URL: redis.url, OPENAI_BASE_URL: 'localhost:18081/v1', OPENAI_API_KEY: 'x' }),
      run(GATEWAY, { REDIS_URL: 'localhost:6379' }),
      run(STACK, { OPENAI_BASE_URL: 'ftp://model:8081/v1' }),
      run(CLI, { CADRE_URL: 'gateway:8080' }, ['status']),
    ]);
    expectRefused(vmAgent!, [`vm-agent: CADRE_GATEWAY_URL: ${HTTP_SCHEMES} (e.g. http://127.0.0.1:8080), got one starting "gateway:"`]);
    expectRefused(worker!, [`worker: OPENAI_BASE_URL: ${HTTP_SCHEMES} (e.g. http://127.0.0.1:8081/v1), got one starting "localhost:"`]);
    expectRefused(gateway!, ['gateway: REDIS_URL: expected a URL starting redis://, rediss:// or unix:// (e.g. redis://127.0.0.1:6379), got one starting "localhost:"']);
    expectRefused(stack!, [`npm start: OPENAI_BASE_URL: ${HTTP_SCHEMES} (e.g. http://127.0.0.1:8081/v1), got one starting "ftp:"`]);
    expectRefused(cli!, [`cadre: CADRE_URL: ${HTTP_SCHEMES} (e.g. http://127.0.0.1:8080), got one starting "gateway:"`], 2);
    for (const result of [vmAgent!, worker!, gateway!, stack!]) expect(result.stdout).toBe('');
  });

  it('REDIS_TLS and REDIS_DB are reported under their own names, every problem at once', async () => {
    const [cluster, sentinel] = await Promise.all([
      run(GATEWAY, { REDIS_CLUSTER_NODES: '127.0.0.1:7000', REDIS_TLS: 'maybe' }),
      run(WORKER, { REDIS_SENTINELS: '127.0.0.1:26379', REDIS_SENTINEL_NAME: 'm', REDIS_TLS: 'maybe', REDIS_DB: 'abc', CADRE_MAX_TURNS: '0', ...MODEL_ENV }),
    ]);
    expectRefused(cluster!, ['gateway: REDIS_TLS: expected true or false, got "maybe"']);
    expectRefused(sentinel!, [
      'worker: REDIS_TLS: expected true or false, got "maybe"',
      'worker: REDIS_DB: expected an integer in decimal digits, got "abc"',
      'worker: CADRE_MAX_TURNS: must be >= 1, got 0',
    ]);
  });

  it('integers are decimal digits only: 0x10, 1e9 and 8.0 are refused', async () => {
    const [gateway, worker] = await Promise.all([
      run(GATEWAY, { REDIS_URL: redis.url, CADRE_EVENT_RETENTION_SEC: '0x10', RUNS_WORKER_TTL_MS: '1e9' }),
      run(WORKER, { REDIS_URL: redis.url, WORKER_CONCURRENCY: '8.0', ...MODEL_ENV }),
    ]);
    expectRefused(gateway!, [
      'gateway: CADRE_EVENT_RETENTION_SEC: expected an integer in decimal digits, got "0x10"',
      'gateway: RUNS_WORKER_TTL_MS: expected an integer in decimal digits, got "1e9"',
    ]);
    expectRefused(worker!, ['worker: WORKER_CONCURRENCY: expected an integer in decimal digits, got "8.0"']);
  });

  it("REDIS_URL's database: not a number is refused as configuration; one the server does not have, at start", async () => {
    const password = `pw-${randomUUID()}`;
    const withPassword = (path: string) => `redis://:${password}@${new URL(redis.url).host}${path}`;
    const admin = new Redis(redis.url);
    await admin.call('CONFIG', 'SET', 'requirepass', password);
    try {
      const env = { PORT: '0', HOST: '127.0.0.1', CADRE_DEV_MODE: 'true', CADRE_KEY_PREFIX: 'bad-config' };
      const [word, negative, query, gateway, worker] = await Promise.all([
        run(GATEWAY, { ...env, REDIS_URL: withPassword('/abc') }),
        run(GATEWAY, { ...env, REDIS_URL: withPassword('/-1') }),
        run(WORKER, { REDIS_URL: `unix:///tmp/redis.sock?db=two`, ...MODEL_ENV }),
        run(GATEWAY, { ...env, REDIS_URL: withPassword('/99') }),
        run(WORKER, { REDIS_URL: withPassword('/99'), ...MODEL_ENV, CADRE_KEY_PREFIX: 'bad-config' }),
      ]);
      expectRefused(word!, [`gateway: REDIS_URL: the path after host:port must be ${DB_RANGE}, e.g. redis://127.0.0.1:6379/0; got "/abc"`]);
      expectRefused(negative!, [`gateway: REDIS_URL: the path after host:port must be ${DB_RANGE}, e.g. redis://127.0.0.1:6379/0; got "/-1"`]);
      expectRefused(query!, [`worker: REDIS_URL: ?db= must be ${DB_RANGE}; got "two"`]);
      const noDb99 = 'REDIS_URL: Redis has no database 99 (ERR DB index is out of range): use one below the server\'s "databases" setting (16 by default: 0 to 15)';
      expectRefused(gateway!, [`gateway: ${noDb99}`]);
      expectRefused(worker!, [`worker: ${noDb99}`]);
      // Nothing started (no log line, no "listening"), and the password is never shown.
      for (const result of [word!, negative!, query!, gateway!, worker!]) {
        expect(result.stdout).toBe('');
        expect(result.stderr).not.toContain(password);
      }
    } finally {
      await admin.call('CONFIG', 'SET', 'requirepass', '');
      await admin.quit().catch(() => undefined);
    }
  });

  it('REDIS_DB a Sentinel-found master does not have: one line at start', async () => {
    const sentinel = await startTestSentinel();
    try {
      const result = await run(GATEWAY, {
        REDIS_SENTINELS: `127.0.0.1:${sentinel.sentinel.port}`, REDIS_SENTINEL_NAME: 'mymaster', REDIS_DB: '99',
        PORT: '0', HOST: '127.0.0.1', CADRE_DEV_MODE: 'true', CADRE_KEY_PREFIX: 'bad-config',
      });
      expectRefused(result, ['gateway: REDIS_DB: Redis has no database 99 (ERR DB index is out of range): use one below the server\'s "databases" setting (16 by default: 0 to 15)']);
      expect(result.stdout).toBe('');
    } finally {
      await sentinel.stop();
    }
  });

  it('a VM_AGENT_WORKDIR the vm-agent cannot create: one line, not a stack trace', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cadre-bad-workdir-'));
    try {
      const file = join(dir, 'a-file');
      writeFileSync(file, '');
      const result = await run(VM_AGENT, { VM_AGENT_WORKDIR: join(file, 'x'), RUNS_API_KEY: 'k', ...MODEL_ENV });
      expectRefused(result, [`vm-agent: VM_AGENT_WORKDIR: cannot use "${join(file, 'x')}" as the runs' directory (ENOTDIR); it must be a directory the vm-agent can create or write`]);
      expect(result.stdout).toBe('');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, realpathSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';
import { findFreePort } from '@cadre/embedded-redis';
import { isProcessAlive } from '@cadre/testing';

const REPO = fileURLToPath(new URL('../../../', import.meta.url));
const TASK_BODY = {
  workspace_id: 'demo',
  goal: 'Weigh two options',
  team: { workers: [{ role: 'researcher', instructions: 'List the pros.' }, { role: 'critic', instructions: 'List the cons.' }] },
};


async function until<T>(what: string, probe: () => T | undefined | Promise<T | undefined>, timeoutMs: number, output: () => string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await probe();
    if (value !== undefined) return value;
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what}; stack output:\n${output()}`);
}

/** The environment of `npm start` on embedded defaults: nothing from the developer's shell points it elsewhere. */
function stackEnv(port: number, dataDir: string, more: Record<string, string> = {}): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = { ...process.env, PORT: String(port), CADRE_DATA_DIR: dataDir, LOG_LEVEL: 'info', ...more };
  for (const name of ['REDIS_URL', 'OPENAI_BASE_URL', 'OPENAI_API_KEY', 'CADRE_API_KEY', 'CADRE_API_KEYS', 'RUNS_API_KEY', 'WINDIE_RUNS_API_KEY', 'WINDIE_DEMO_API_KEY', 'RUNS_CONTROL_API_KEY', 'WINDIE_RUNS_CONTROL_API_KEY', 'HOST', 'WORKERS', 'VM_AGENTS', 'CADRE_URL']) {
    if (!(name in more)) delete env[name];
  }
  return env;
}

interface StartedStack {
  process: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
  /** Resolves at the banner; throws if the stack exits first. */
  banner: () => Promise<void>;
}

function startStack(env: Record<string, string | undefined>): StartedStack {
  const child = spawn(process.execPath, ['apps/stack/src/main.ts'], { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const out = (): string => output;
  const banner = async (): Promise<void> => {
    await until('the banner', () => {
      if (child.exitCode !== null) throw new Error(`the stack exited with ${child.exitCode} before its banner:\n${output}`);
      return output.includes('Cadre is up') || undefined;
    }, 30_000, out);
  };
  return { process: child, output: out, exited, banner };
}

function killIfRunning(stack: StartedStack | undefined): void {
  if (stack !== undefined && stack.process.exitCode === null && stack.process.signalCode === null) stack.process.kill('SIGKILL');
}

/** `npx cadre status` as a user of the data dir runs it: its exit code and output. */
async function cliStatus(dataDir: string): Promise<{ code: number; output: string }> {
  const env = stackEnv(0, dataDir);
  delete env.PORT;
  try {
    const { stdout } = await promisify(execFile)(process.execPath, ['apps/cli/src/main.ts', 'status'], { cwd: REPO, env });
    return { code: 0, output: stdout };
  } catch (err) {
    const failed = err as { code: number; stdout: string; stderr: string };
    return { code: failed.code, output: failed.stdout + failed.stderr };
  }
}

/** The pids of the redis-servers whose dir (their working directory) is `dir`. */
function redisServersOn(dir: string): number[] {
  const target = realpathSync(dir);
  return readdirSync('/proc').filter((name) => /^\d+$/.test(name)).filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('redis-server') && readlinkSync(`/proc/${pid}/cwd`) === target;
    } catch {
      return false;
    }
  }).map(Number);
}

it('npm start runs the whole stack on embedded defaults and stops all of it on SIGTERM', async () => {
  const port = await findFreePort();
  const dataDir = mkdtempSync(join(tmpdir(), 'cadre-stack-'));
  const started = startStack(stackEnv(port, dataDir, { RUNS_HEARTBEAT_INTERVAL_MS: '200' }));
  const { process: stack, exited, output: out } = started;

  try {
    await started.banner();
    const output = out();
    const key = /export KEY=(\S+)/.exec(output)?.[1];
    const redisPid = Number(/private redis-server, pid (\d+)/.exec(output)?.[1]);
    const childPids = [...output.matchAll(/started (?:gateway|worker-\d+|vm-agent-\d+) \(pid (\d+)\)/g)].map((m) => Number(m[1]));
    expect(key).toBeDefined();
    expect(redisPid).toBeGreaterThan(0);
    expect(childPids).toHaveLength(3);
    expect(statSync(join(dataDir, 'dev-api-key')).mode & 0o777).toBe(0o600);
    // The banner's first line points at the board; the CLI finds the gateway from what the stack wrote.
    expect(/Cadre is up\.\s+(\S.*)/.exec(output)?.[1]).toMatch(new RegExp(`^Board\\s+http://localhost:${port}/ `));
    expect(readFileSync(join(dataDir, 'gateway-url'), 'utf8').trim()).toBe(`http://127.0.0.1:${port}`);
    // Not a terminal: the children's logs stay JSON lines.
    expect(output).toMatch(/^[\w-]+\s+\| \{"level":\d+,/m);

    const base = `http://127.0.0.1:${port}`;
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const created = await fetch(`${base}/api/tasks`, { method: 'POST', headers, body: JSON.stringify(TASK_BODY) });
    expect(created.status).toBe(201);
    const taskId = ((await created.json()) as { task: { task_id: string } }).task.task_id;

    type Event = { seq: number; event_type: string };
    const events = await until(
      'task_completed',
      async () => {
        const res = await fetch(`${base}/api/tasks/${taskId}/events?after_seq=0&limit=1000`, { headers });
        const body = (await res.json()) as { events: Event[] };
        return body.events.some((e) => e.event_type === 'task_completed') ? body.events : undefined;
      },
      20_000,
      out,
    );
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    const task = (await (await fetch(`${base}/api/tasks/${taskId}`, { headers })).json()) as { task: { status: string } };
    expect(task.task.status).toBe('completed');

    // The stack's vm-agent serves workspace `default`; the runs API has its own dev key, which the tasks API refuses.
    const runsKey = /export RUNS_KEY=(\S+)/.exec(output)?.[1];
    expect(runsKey).toBeDefined();
    expect(runsKey).not.toBe(key);
    expect((await fetch(`${base}/api/tasks/${taskId}`, { headers: { authorization: `Bearer ${runsKey}` } })).status).toBe(401);
    const runsHeaders = { 'x-windie-runs-key': runsKey!, 'content-type': 'application/json' };
    const run = await fetch(`${base}/api/runs/`, { method: 'POST', headers: runsHeaders, body: JSON.stringify({ workspace_id: 'default', query: 'Say hello' }) });
    expect(run.status).toBe(200);
    const runId = ((await run.json()) as { run: { run_id: string } }).run.run_id;
    const finished = await until('the run to complete', async () => {
      const res = (await (await fetch(`${base}/api/runs/${runId}`, { headers: runsHeaders })).json()) as { status: string; worker: { worker_id: string } };
      return res.status === 'completed' ? res : undefined;
    }, 20_000, out);
    expect(finished.worker.worker_id).toMatch(/-1$/);
    // The vm-agent starts once the gateway is ready: its first heartbeats are not refused.
    expect(out()).not.toMatch(/ECONNREFUSED|heartbeat failed/);

    stack.kill('SIGTERM');
    const code = await Promise.race([exited, sleep(30_000).then(() => 'still running')]);
    expect(code, out()).toBe(0);
    expect(isProcessAlive(redisPid)).toBe(false);
    for (const pid of childPids) expect(isProcessAlive(pid)).toBe(false);
  } finally {
    killIfRunning(started);
    rmSync(dataDir, { recursive: true, force: true });
  }
}, 90_000);

/**
 * Runs `body` with a fresh data dir, two free ports and a way to start a stack (no vm-agent) on that dir; then
 * kills whatever it started that is still running, and a redis-server a failed test left on the dir.
 */
async function onOneDataDir(body: (dataDir: string, ports: [number, number], start: (port: number) => StartedStack) => Promise<void>): Promise<void> {
  const ports: [number, number] = [await findFreePort(), await findFreePort()];
  const dataDir = mkdtempSync(join(tmpdir(), 'cadre-stack-'));
  const stacks: StartedStack[] = [];
  try {
    await body(dataDir, ports, (port) => {
      const stack = startStack(stackEnv(port, dataDir, { VM_AGENTS: '0' }));
      stacks.push(stack);
      return stack;
    });
  } finally {
    for (const stack of stacks) killIfRunning(stack);
    if (existsSync(join(dataDir, 'redis'))) for (const pid of redisServersOn(join(dataDir, 'redis'))) process.kill(pid, 'SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** `stack` serves `dataDir`: its redis-server is the only one on it, and the CLI there reaches its gateway. */
async function expectTheOnlyStackOn(dataDir: string, stack: StartedStack, port: number): Promise<void> {
  const redisPid = Number(/private redis-server, pid (\d+)/.exec(stack.output())?.[1]);
  expect(redisServersOn(join(dataDir, 'redis'))).toEqual([redisPid]);
  const status = await cliStatus(dataDir);
  expect(status.code, status.output).toBe(0);
  expect(status.output).toContain(`gateway    http://127.0.0.1:${port}`);
}

it('a second npm start on the same data dir is refused, naming the running stack, and changes nothing', () =>
  onOneDataDir(async (dataDir, [port, otherPort], start) => {
    const first = start(port);
    await first.banner();
    const gatewayUrlFile = join(dataDir, 'gateway-url');

    // Another PORT, as the port-in-use message used to suggest: still the same data dir.
    const second = start(otherPort);
    const ended = await until('the second start to end', () => second.process.exitCode ?? (second.output().includes('Cadre is up') ? 'up' : undefined), 30_000, second.output);
    expect(ended, second.output()).toBe(1);
    expect(second.output().trim()).toBe(
      `npm start: CADRE_DATA_DIR: ${dataDir} is in use by the stack running as pid ${first.process.pid} (gateway http://127.0.0.1:${port}); ` +
        `stop it (Ctrl-C where it runs, or kill ${first.process.pid}) or give this one another CADRE_DATA_DIR`,
    );
    expect(readFileSync(gatewayUrlFile, 'utf8').trim()).toBe(`http://127.0.0.1:${port}`);
    await expectTheOnlyStackOn(dataDir, first, port);

    // A clean stop takes its gateway-url (and its hold) away: the CLI never points at a stopped gateway.
    first.process.kill('SIGTERM');
    expect(await first.exited, first.output()).toBe(0);
    expect(existsSync(gatewayUrlFile)).toBe(false);
    expect(existsSync(join(dataDir, 'stack.json'))).toBe(false);
  }), 90_000);

it('after a kill -9 of the stack, the next npm start stops the redis-server it left on the data dir', () =>
  onOneDataDir(async (dataDir, [port, otherPort], start) => {
    const first = start(port);
    await first.banner();
    const leftRedisPid = Number(/private redis-server, pid (\d+)/.exec(first.output())?.[1]);
    const childPids = [...first.output().matchAll(/started (?:gateway|worker-\d+) \(pid (\d+)\)/g)].map((m) => Number(m[1]));
    first.process.kill('SIGKILL');
    await first.exited;
    // Its children stop by themselves; its redis-server stays.
    await until('the children to stop', () => childPids.every((pid) => !isProcessAlive(pid)) || undefined, 20_000, first.output);
    expect(isProcessAlive(leftRedisPid)).toBe(true);

    const next = start(otherPort);
    await next.banner();
    expect(next.output()).toContain(`stopped the redis-server (pid ${leftRedisPid}, port `);
    expect(isProcessAlive(leftRedisPid)).toBe(false);
    await expectTheOnlyStackOn(dataDir, next, otherPort);

    next.process.kill('SIGTERM');
    expect(await next.exited, next.output()).toBe(0);
  }), 90_000);

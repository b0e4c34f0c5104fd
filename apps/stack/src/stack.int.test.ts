import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
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

it('npm start runs the whole stack on embedded defaults and stops all of it on SIGTERM', async () => {
  const port = await findFreePort();
  const dataDir = mkdtempSync(join(tmpdir(), 'cadre-stack-'));
  const env: Record<string, string | undefined> = { ...process.env, PORT: String(port), CADRE_DATA_DIR: dataDir, LOG_LEVEL: 'info', RUNS_HEARTBEAT_INTERVAL_MS: '200' };
  // Embedded defaults only: nothing from the developer's shell may point the stack elsewhere.
  for (const name of ['REDIS_URL', 'OPENAI_BASE_URL', 'OPENAI_API_KEY', 'CADRE_API_KEY', 'CADRE_API_KEYS', 'RUNS_API_KEY', 'WINDIE_RUNS_API_KEY', 'WINDIE_DEMO_API_KEY', 'RUNS_CONTROL_API_KEY', 'WINDIE_RUNS_CONTROL_API_KEY', 'HOST', 'WORKERS', 'VM_AGENTS']) delete env[name];

  const stack = spawn(process.execPath, ['apps/stack/src/main.ts'], { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  stack.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  stack.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => stack.once('exit', (code) => resolve(code)));
  const out = (): string => output;

  try {
    await until('the banner', () => {
      if (stack.exitCode !== null) throw new Error(`the stack exited with ${stack.exitCode} before its banner:\n${output}`);
      return output.includes('Cadre is up') || undefined;
    }, 30_000, out);
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
    expect(output).not.toMatch(/ECONNREFUSED|heartbeat failed/);

    stack.kill('SIGTERM');
    const code = await Promise.race([exited, sleep(30_000).then(() => 'still running')]);
    expect(code, output).toBe(0);
    expect(isProcessAlive(redisPid)).toBe(false);
    for (const pid of childPids) expect(isProcessAlive(pid)).toBe(false);
  } finally {
    if (stack.exitCode === null && stack.signalCode === null) stack.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  }
}, 90_000);

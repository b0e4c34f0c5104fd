import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue } from 'bullmq';
import { AGENT_QUEUE, KeyBuilder, TaskStore, agentJobId } from '@cadre/store';
import { TEST_API_KEY, startTestRedis, waitUntil, type TestRedis } from '@cadre/testing';
import { TestStack } from './support/stack.ts';

// Nothing stranded (a gateway kill -9ed in the middle of a burst of creates) and no secret in a log (a Redis that
// refuses the password, at start and after a rotation), with real processes.

const REPO = fileURLToPath(new URL('../', import.meta.url));
let stack: TestStack;
let redis: Redis;

beforeAll(async () => {
  // The in-process gateway sweeps for unenqueued tasks after 3 s (long enough to count what the kill left before it sweeps); the killed one is a separate OS process.
  stack = await TestStack.start({ workers: 1, env: { CADRE_ENQUEUE_GRACE_MS: '3000', WORKER_CONCURRENCY: '16' } });
  redis = new Redis(stack.redis.url);
});
afterAll(async () => {
  await redis?.quit();
  await stack?.stop();
});

/** A gateway or worker as an OS process with every line of its output kept. */
function spawnService(entry: string, env: Record<string, string>): { child: ChildProcess; output: () => string; exited: Promise<number | null> } {
  let output = '';
  const child = spawn(process.execPath, [entry], { cwd: REPO, env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, output: () => output, exited };
}

/** Every task stored under this stack's prefix, with its status. */
async function allTasks(): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const meta of await redis.keys(`${stack.prefix}:{t:*}:meta`)) {
    const [id, status] = await redis.hmget(meta, 'task_id', 'status');
    if (id && status) out.set(id, status);
  }
  return out;
}
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

describe('nothing stranded', () => {
  it('a task written but never enqueued (its gateway died in between) is enqueued by the sweeper and runs', async () => {
    // The store's half of a create, exactly what a gateway does before it adds the BullMQ jobs.
    const store = new TaskStore({ redis, keys: new KeyBuilder(stack.prefix) });
    const { task } = await store.createTask({
      workspace_id: 'orphans', goal: 'left behind',
      team: { lead: { instructions: 'lead' }, workers: [{ role: 'pro', instructions: 'i', tools: [] }], max_workers: 4 },
      metadata: {},
    });
    expect(task.status).toBe('queued');
    const status = await waitUntil('the orphan to finish', async () => {
      const s = (await store.getTask(task.task_id))?.status;
      return s && TERMINAL.has(s) ? s : undefined;
    }, { timeoutMs: 30_000 });
    expect(status).toBe('completed');
    await waitUntil('its enqueue mark to be cleared', async () => (await redis.zscore(new KeyBuilder(stack.prefix).tasksEnqueueing(), task.task_id)) === null, { timeoutMs: 30_000 });
  });

  it('a retry with the same Idempotency-Key lists a task its first request wrote but did not list', async () => {
    // The first request died after the store's script (the task and its enqueue mark are written), before the
    // listing and the jobs. The client retries with its key before the sweeper's grace is over.
    const store = new TaskStore({ redis, keys: new KeyBuilder(stack.prefix) });
    const workspace = `retried-${randomUUID()}`;
    const key = `idem-${randomUUID()}`;
    const { task } = await store.createTask({
      workspace_id: workspace, goal: 'left behind, then retried',
      team: { lead: { instructions: 'lead' }, workers: [{ role: 'pro', instructions: 'i', tools: [] }], max_workers: 4 },
      metadata: {},
    }, key);
    const retry = await fetch(`${stack.url}/api/tasks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TEST_API_KEY}`, 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ workspace_id: workspace, goal: 'left behind, then retried', team: { workers: [{ role: 'pro', instructions: 'i' }] } }),
    });
    expect(retry.status).toBe(200);
    expect(((await retry.json()) as { task: { task_id: string } }).task.task_id).toBe(task.task_id);
    // The retry enqueued it and cleared the mark, so the sweeper will never list it: the retry must have.
    const status = await waitUntil('the retried task to finish', async () => {
      const s = (await store.getTask(task.task_id))?.status;
      return s && TERMINAL.has(s) ? s : undefined;
    }, { timeoutMs: 30_000 });
    expect(status).toBe('completed');
    const page = await fetch(`${stack.url}/api/tasks?workspace_id=${workspace}`, { headers: { authorization: `Bearer ${TEST_API_KEY}` } });
    expect(((await page.json()) as { tasks: { task_id: string }[] }).tasks.map((t) => t.task_id)).toEqual([task.task_id]);
  });

  it('every task a kill -9ed gateway created during a burst ends', async () => {
    const gateway = spawnService('apps/gateway/src/main.ts', {
      REDIS_URL: stack.redis.url, CADRE_API_KEY: TEST_API_KEY, CADRE_KEY_PREFIX: stack.prefix, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info',
    });
    try {
      const port = await waitUntil('the gateway to listen', () => Number(/"port":(\d+),"msg":"gateway listening/.exec(gateway.output())?.[1] ?? 0) || undefined, { timeoutMs: 15_000 });
      let answered = 0;
      const create = async (): Promise<void> => {
        try {
          const res = await fetch(`http://127.0.0.1:${port}/api/tasks`, {
            method: 'POST',
            headers: { authorization: `Bearer ${TEST_API_KEY}`, 'content-type': 'application/json' },
            body: JSON.stringify({ workspace_id: 'burst', goal: `burst ${randomUUID()}`, team: { workers: [{ role: 'pro' }] } }),
          });
          if (res.status === 201) answered++;
        } catch {
          // The gateway died with this request in flight.
        }
      };
      // 24 clients keep creating until the gateway dies; it is killed once 60 creates have been answered.
      const clients = Array.from({ length: 24 }, async () => {
        while (gateway.child.exitCode === null && gateway.child.signalCode === null) await create();
      });
      await waitUntil('60 answered creates', () => answered >= 60, { timeoutMs: 20_000 });
      gateway.child.kill('SIGKILL');
      await Promise.all(clients);
      await gateway.exited;

      const created = await allTasks();
      expect(created.size).toBeGreaterThanOrEqual(answered);
      // How many the dead gateway left without a job (what the sweeper is for); reported, not asserted: the kill
      // may or may not land between a task's write and its enqueue.
      const queue = new Queue(AGENT_QUEUE, { connection: redis, prefix: new KeyBuilder(stack.prefix).bullPrefix() });
      let orphans = 0;
      for (const [id, status] of created) if (status === 'queued' && !(await queue.getJob(agentJobId(id, 'lead')))) orphans++;
      await queue.close();
      console.log(`burst: ${answered} creates answered, ${created.size} tasks stored, ${orphans} without a job after the kill`);
      // Every task that reached Redis ends (run by the worker, enqueued by the sweeper if the dead gateway had not).
      const ids = [...created.keys()];
      await waitUntil('every task to end', async () => {
        const now = await allTasks();
        return ids.every((id) => TERMINAL.has(now.get(id) ?? '')) || undefined;
      }, { timeoutMs: 60_000 });
      const final = await allTasks();
      expect(ids.filter((id) => final.get(id) !== 'completed')).toEqual([]);
      // Marks of tasks the dead gateway enqueued but could not clear go once the grace has passed.
      await waitUntil('the enqueue marks to be swept', async () => (await redis.zcard(new KeyBuilder(stack.prefix).tasksEnqueueing())) === 0, { timeoutMs: 30_000 });
    } finally {
      if (gateway.child.exitCode === null) gateway.child.kill('SIGKILL');
    }
  });
});

describe('no secret in a log', () => {
  // A Redis of their own: these tests set a password and cut connections.
  let secured: TestRedis;
  beforeAll(async () => {
    secured = await startTestRedis();
  });
  afterAll(async () => {
    await secured?.stop();
  });

  it('a wrong Redis password at start: one clear line, exit 1, the password nowhere in the output', async () => {
    const password = `pw-${randomUUID()}`;
    const wrong = `wrong-${randomUUID()}`;
    const admin = new Redis(secured.url);
    const url = new URL(secured.url);
    try {
      await admin.config('SET', 'requirepass', password);
      const badUrl = `redis://:${wrong}@${url.host}`;
      const services = [
        spawnService('apps/gateway/src/main.ts', { REDIS_URL: badUrl, CADRE_API_KEY: TEST_API_KEY, CADRE_KEY_PREFIX: `x${stack.prefix}`, PORT: '0', HOST: '127.0.0.1' }),
        spawnService('apps/worker/src/main.ts', { REDIS_URL: badUrl, OPENAI_BASE_URL: stack.model.url, OPENAI_API_KEY: 'scripted', CADRE_KEY_PREFIX: `x${stack.prefix}` }),
      ];
      for (const [i, service] of services.entries()) {
        expect(await service.exited).toBe(1);
        expect(service.output().trim().split('\n')).toEqual([
          `${i === 0 ? 'gateway' : 'worker'}: REDIS_URL: Redis refused the credentials in REDIS_URL (WRONGPASS); check the password (it is not shown here)`,
        ]);
        expect(service.output()).not.toContain(wrong);
        expect(service.output()).not.toContain(password);
      }
    } finally {
      await admin.config('SET', 'requirepass', '').catch(() => undefined);
      await admin.quit().catch(() => undefined);
    }
  });

  it('a password rotated under running processes: their Redis and BullMQ errors are logged without it', async () => {
    const first = `first-${randomUUID()}`;
    const rotated = `rotated-${randomUUID()}`;
    const admin = new Redis(secured.url);
    const url = new URL(secured.url);
    const prefix = `r${stack.prefix}`;
    await admin.config('SET', 'requirepass', first);
    const goodUrl = `redis://:${first}@${url.host}`;
    const gateway = spawnService('apps/gateway/src/main.ts', { REDIS_URL: goodUrl, CADRE_API_KEY: TEST_API_KEY, CADRE_KEY_PREFIX: prefix, PORT: '0', HOST: '127.0.0.1' });
    const worker = spawnService('apps/worker/src/main.ts', { REDIS_URL: goodUrl, OPENAI_BASE_URL: stack.model.url, OPENAI_API_KEY: 'scripted', CADRE_KEY_PREFIX: prefix });
    try {
      await waitUntil('both to start', () => gateway.output().includes('gateway listening') && worker.output().includes('worker pool ready'), { timeoutMs: 15_000 });
      // Rotate, and cut every connection: each reconnect now offers the old password.
      await admin.config('SET', 'requirepass', rotated);
      await admin.auth(rotated);
      await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
      await waitUntil('both to log the refusal', () => /WRONGPASS/.test(gateway.output()) && /WRONGPASS/.test(worker.output()), { timeoutMs: 15_000 });
      for (const service of [gateway, worker]) {
        expect(service.output()).not.toContain(first);
        expect(service.output()).not.toContain(rotated);
      }
    } finally {
      gateway.child.kill('SIGKILL');
      worker.child.kill('SIGKILL');
      await admin.config('SET', 'requirepass', '').catch(() => undefined);
      await admin.quit().catch(() => undefined);
    }
  });
});

import { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertContiguous, httpClient, pollUntilTerminal, waitForEvent, waitUntil, type TestRedisClient } from '@cadre/testing';
import { AGENT_QUEUE, KeyBuilder, agentJobId } from '@cadre/store';
import { TestStack } from './support/stack.ts';

// Workers here are real OS processes, so cancel must cross processes and kill -9 is a real crash.
let stack: TestStack;
let queue: Queue;
let redis: TestRedisClient;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 0 });
  redis = stack.redis.connect();
  queue = new Queue(AGENT_QUEUE, { connection: redis, prefix: new KeyBuilder(stack.prefix).bullPrefix() });
});
afterAll(async () => {
  await queue?.close();
  redis?.disconnect();
  await stack?.stop();
});

async function createTask(workers: object[]): Promise<string> {
  const res = await httpClient(stack.url).post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: 'ops', goal: 'Long job', team: { workers } });
  expect(res.status).toBe(201);
  return res.body.task.task_id;
}

describe('cancel', () => {
  it('reaches a running tool in another process within a second and ends the task cancelled', async () => {
    const worker = await stack.spawnWorkerProcess();
    try {
      const taskId = await createTask([
        { role: 'sleeper', instructions: 'Sleep. [[scripted:call=wait({"ms":30000})]]', tools: ['wait'] },
        { role: 'idler', instructions: 'Think slowly. [[scripted:delay=30000]]' },
      ]);
      await waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_tool_call' && e.worker_id === 'sleeper-1');
      await waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_phase' && e.worker_id === 'idler-2');

      const api = httpClient(stack.url);
      const cancelled = await api.post<{ task: { status: string; workers: { worker_id: string; status: string; failure_reason: string }[] } }>(`/api/tasks/${taskId}/cancel`, { reason: 'operator said stop' });
      expect(cancelled.status).toBe(200);
      expect(cancelled.body.task.status).toBe('cancelled');
      expect(cancelled.body.task.workers.map((w) => `${w.worker_id}:${w.status}:${w.failure_reason}`)).toEqual([
        'lead:failed:cancelled',
        'sleeper-1:failed:cancelled',
        'idler-2:failed:cancelled',
      ]);
      // The running tool (a 30 s wait) and the hanging model call (a 30 s delay) both abort: their jobs leave
      // `active` long before either could have finished on its own. (How fast: bench/cancel.bench.ts.)
      for (const workerId of ['sleeper-1', 'idler-2']) {
        const job = await waitUntil(`${workerId}'s job to leave active`, async () => {
          const found = await queue.getJob(agentJobId(taskId, workerId));
          return found?.finishedOn !== undefined ? found : null;
        });
        expect(job.finishedOn! - job.processedOn!).toBeLessThan(30_000);
      }

      // Repeating the cancel is harmless.
      expect((await api.post(`/api/tasks/${taskId}/cancel`)).status).toBe(200);
      const events = await pollUntilTerminal(stack.url, taskId);
      assertContiguous(events.map((e) => e.seq));
      expect(events.slice(-5).map((e) => `${e.event_type}:${e.worker_id ?? ''}`)).toEqual([
        'worker_failed:idler-2',
        'worker_exited:idler-2',
        'worker_failed:sleeper-1',
        'worker_exited:sleeper-1',
        'task_cancelled:',
      ]);
      expect(events.filter((e) => e.event_type === 'worker_failed').every((e) => (e.payload as { reason: string }).reason === 'cancelled')).toBe(true);
      // Nothing was appended after the terminal event, even by the aborted loops (once they have returned).
      await waitUntil('the aborted loops to return their jobs', async () => (await queue.getActiveCount()) === 0);
      const after = await api.get<{ events: unknown[] }>(`/api/tasks/${taskId}/events?after_seq=${events.at(-1)!.seq}`);
      expect(after.body.events).toEqual([]);
    } finally {
      worker.kill('SIGKILL');
    }
  });
});

describe('crash safety', () => {
  it('hands the job of a kill -9ed worker to another process; the log records the lost attempt', async () => {
    const env = { CADRE_JOB_LOCK_MS: '1500' };
    const first = await stack.spawnWorkerProcess(env);
    const taskId = await createTask([{ role: 'builder', instructions: 'Build. [[scripted:call=wait({"ms":1500})]]', tools: ['wait'] }]);
    await waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_tool_call' && e.worker_id === 'builder-1');
    first.kill('SIGKILL');
    const second = await stack.spawnWorkerProcess(env);
    try {
      const events = await pollUntilTerminal(stack.url, taskId, 30_000);
      assertContiguous(events.map((e) => e.seq));
      const builder = events.filter((e) => e.worker_id === 'builder-1').map((e) => `${e.event_type}#${e.attempt}`);
      expect(builder).toEqual([
        'worker_started#1',
        'worker_phase#1',
        'worker_tool_call#1',
        'worker_failed#1',
        'worker_exited#1',
        'worker_started#2',
        'worker_phase#2',
        'worker_tool_call#2',
        'worker_phase#2',
        'worker_completed#2',
        'worker_exited#2',
      ]);
      const lost = events.find((e) => e.event_type === 'worker_failed')!;
      expect((lost.payload as { reason: string }).reason).toBe('worker_lost');
      const hosts = events.filter((e) => e.event_type === 'worker_started' && e.worker_id === 'builder-1').map((e) => (e.payload as { host_id: string }).host_id);
      expect(hosts[0]).toContain(`:${first.pid}`);
      expect(hosts[1]).toContain(`:${second.pid}`);
      expect(events.at(-1)!.event_type).toBe('task_completed');
      const task = await httpClient(stack.url).get<{ task: { workers: { worker_id: string; attempt: number; status: string }[] } }>(`/api/tasks/${taskId}`);
      expect(task.body.task.workers.find((w) => w.worker_id === 'builder-1')).toMatchObject({ attempt: 2, status: 'completed' });
    } finally {
      second.kill('SIGKILL');
    }
  });
});

describe('crash safety of a planning lead', () => {
  it('re-plans the same team after the lead dies mid-plan: no duplicated workers, contiguous log', async () => {
    const env = { CADRE_JOB_LOCK_MS: '1500' };
    const first = await stack.spawnWorkerProcess(env);
    const res = await httpClient(stack.url).post<{ task: { task_id: string } }>('/api/tasks', {
      workspace_id: 'ops',
      goal: 'Plan a team [[scripted:spawn=alpha,beta]]',
      team: { lead: { instructions: 'Plan slowly. [[scripted:delay=1200]]' } },
    });
    const taskId = res.body.task.task_id;
    await waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_phase' && e.worker_id === 'lead');
    first.kill('SIGKILL');
    const second = await stack.spawnWorkerProcess(env);
    try {
      const events = await pollUntilTerminal(stack.url, taskId, 30_000);
      assertContiguous(events.map((e) => e.seq));
      expect(events.at(-1)!.event_type).toBe('task_completed');
      const started = events.filter((e) => e.event_type === 'worker_started').map((e) => `${e.worker_id}#${e.attempt}`);
      expect(started).toEqual(expect.arrayContaining(['lead#1', 'lead#2', 'alpha-1#1', 'beta-2#1']));
      expect(started.filter((s) => !s.startsWith('lead'))).toHaveLength(2);
      const task = await httpClient(stack.url).get<{ task: { workers: { worker_id: string; status: string }[] } }>(`/api/tasks/${taskId}`);
      expect(task.body.task.workers.map((w) => `${w.worker_id}:${w.status}`)).toEqual(['lead:completed', 'alpha-1:completed', 'beta-2:completed']);
    } finally {
      second.kill('SIGKILL');
    }
  });
});

describe('graceful shutdown', () => {
  it('on SIGTERM a worker with jobs in flight stops taking jobs, hands each back after the grace period and exits 0; another worker finishes them, log contiguous', async () => {
    const draining = await stack.spawnWorkerProcess({ CADRE_SHUTDOWN_GRACE_MS: '300' });
    const roles = ['drainer', 'digger', 'dreamer'];
    const taskId = await createTask(roles.map((role) => ({ role, instructions: 'Wait. [[scripted:call=wait({"ms":2000})]]', tools: ['wait'] })));
    // All three jobs are in flight (each in its tool call) when the signal comes.
    for (const role of roles) await waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_tool_call' && e.worker_id === `${role}-${roles.indexOf(role) + 1}`);
    const exited = new Promise<number | null>((resolve) => draining.once('exit', resolve));
    draining.kill('SIGTERM');
    expect(await exited).toBe(0);

    const successor = await stack.spawnWorkerProcess();
    try {
      const events = await pollUntilTerminal(stack.url, taskId, 20_000);
      assertContiguous(events.map((e) => e.seq));
      for (const [i, role] of roles.entries()) {
        const mine = events.filter((e) => e.worker_id === `${role}-${i + 1}`);
        const handedBack = mine.find((e) => e.event_type === 'worker_failed')!;
        expect(handedBack).toMatchObject({ attempt: 1, payload: { reason: 'worker_shutdown' } });
        expect(mine.filter((e) => e.event_type === 'worker_started').map((e) => e.attempt)).toEqual([1, 2]);
        expect(mine.at(-2)).toMatchObject({ event_type: 'worker_completed', attempt: 2 });
      }
      expect(events.at(-1)!.event_type).toBe('task_completed');
    } finally {
      successor.kill('SIGKILL');
    }
  });
});


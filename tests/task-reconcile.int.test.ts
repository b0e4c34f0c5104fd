// A failover can lose BullMQ writes the dying master acknowledged (README "Failover"): a task's jobs live in
// another slot than its record, so the task stays queued or running with nothing left to run it. Here the loss is
// made the way it happens — the job's keys deleted from Redis (its hash, its place in the queue's lists and sets,
// its entry in its lead's dependencies) — on a real stack, and the gateway's task reconciler must bring the task to
// its end: completed, one terminal event, a contiguous log, no worker run twice, the re-drive counted.
import { Queue } from 'bullmq';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { TeamEvent } from '@cadre/protocol';
import { AGENT_QUEUE, KeyBuilder, agentJobId } from '@cadre/store';
import { assertContiguous, httpClient, pollUntilTerminal, waitForEvent, waitUntil, type TestRedisClient } from '@cadre/testing';
import { Scrape } from './support/prometheus.ts';
import { TestStack } from './support/stack.ts';

// A short grace and interval, so a pass comes soon after the loss (both are waited on as conditions, never timed).
const RECONCILE_ENV = { CADRE_ENQUEUE_GRACE_MS: '100', CADRE_TASK_RECONCILE_INTERVAL_MS: '100' };

let stack: TestStack;
let redis: TestRedisClient;
let queue: Queue;

async function startStack(workers: number): Promise<void> {
  stack = await TestStack.start({ workers, env: RECONCILE_ENV });
  redis = stack.redis.connect();
  queue = new Queue(AGENT_QUEUE, { connection: redis, prefix: new KeyBuilder(stack.prefix).bullPrefix() });
}
beforeEach(() => {
  stack = undefined!;
});
afterEach(async () => {
  await queue?.close();
  redis?.disconnect();
  await stack?.stop();
});

async function createTask(body: object): Promise<string> {
  const res = await httpClient(stack.url).post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: 'reconcile', ...body });
  expect(res.status).toBe(201);
  return res.body.task.task_id;
}

/**
 * Deletes a job as a failover that lost its writes leaves it: its hash and its own keys, its id in every list and
 * set of the queue, and its entry in its parent's dependencies.
 */
async function loseJob(taskId: string, workerId: string): Promise<void> {
  const jobId = agentJobId(taskId, workerId);
  const jobKey = queue.toKey(jobId);
  const parentKey = await redis.hget(jobKey, 'parentKey');
  const k = queue.keys;
  const tx = redis.multi()
    .del(jobKey, `${jobKey}:lock`, `${jobKey}:logs`, `${jobKey}:dependencies`, `${jobKey}:processed`, `${jobKey}:failed`, `${jobKey}:unsuccessful`)
    .lrem(k.wait!, 0, jobId).lrem(k.active!, 0, jobId).lrem(k.paused!, 0, jobId)
    .zrem(k['waiting-children']!, jobId).zrem(k.delayed!, jobId).zrem(k.prioritized!, jobId).zrem(k.completed!, jobId).zrem(k.failed!, jobId);
  if (parentKey) tx.srem(`${parentKey}:dependencies`, jobKey);
  await tx.exec();
  expect(await queue.getJob(jobId)).toBeUndefined();
}

const reconciled = async (reason: string): Promise<number> => (await Scrape.of(`${stack.url}/metrics`)).value('cadre_tasks_reconciled_total', { reason });

/** What a user sees of a task brought to its end: completed once, log contiguous, each agent started once and completed. */
async function expectCompletedOnce(taskId: string, agents: string[]): Promise<TeamEvent[]> {
  const events = await pollUntilTerminal(stack.url, taskId, 30_000);
  assertContiguous(events.map((e) => e.seq));
  expect(events.filter((e) => e.event_type.startsWith('task_') && e.event_type !== 'task_queued').map((e) => e.event_type)).toEqual(['task_completed']);
  expect(events.at(-1)!.event_type).toBe('task_completed');
  const started = (id: string): number => events.filter((e) => e.event_type === 'worker_started' && e.worker_id === id).length;
  expect(Object.fromEntries(agents.map((id) => [id, started(id)]))).toEqual(Object.fromEntries(agents.map((id) => [id, 1])));
  const task = await httpClient(stack.url).get<{ task: { status: string; workers: { worker_id: string; status: string }[] } }>(`/api/tasks/${taskId}`);
  expect(task.body.task.status).toBe('completed');
  expect(task.body.task.workers.map((w) => `${w.worker_id}:${w.status}`)).toEqual(agents.map((id) => `${id}:completed`));
  return events;
}

describe('task reconciler', () => {
  it('enqueues again a queued task whose lead job was lost before any worker took it', async () => {
    await startStack(0);
    const taskId = await createTask({ goal: 'Plan a team [[scripted:spawn=alpha,beta]]' });
    await loseJob(taskId, 'lead');
    await waitUntil('the reconciler to re-drive the task', async () => (await reconciled('lead_job_lost')) === 1);
    expect(await queue.getJobState(agentJobId(taskId, 'lead'))).toBe('waiting');

    await stack.addWorkerPool();
    await expectCompletedOnce(taskId, ['lead', 'alpha-1', 'beta-2']);
    expect(await reconciled('lead_job_lost')).toBe(1);
    expect(await reconciled('worker_job_lost')).toBe(0);
  });

  it('adds again a named worker\'s lost job as its lead\'s child: the lead waits for it and synthesizes once', async () => {
    await startStack(0);
    const taskId = await createTask({
      goal: 'Weigh two options',
      team: { workers: [{ role: 'researcher', instructions: 'List the pros.' }, { role: 'critic', instructions: 'List the cons.' }] },
    });
    expect(await queue.getJobState(agentJobId(taskId, 'lead'))).toBe('waiting-children');
    await loseJob(taskId, 'critic-2');
    await waitUntil('the reconciler to re-drive the task', async () => (await reconciled('worker_job_lost')) === 1);
    expect(await queue.getJobState(agentJobId(taskId, 'critic-2'))).toBe('waiting');
    expect(await queue.getJobState(agentJobId(taskId, 'lead'))).toBe('waiting-children');

    await stack.addWorkerPool();
    const events = await expectCompletedOnce(taskId, ['lead', 'researcher-1', 'critic-2']);
    // The lead synthesized after both workers had finished, the re-added one included.
    const leadStart = events.find((e) => e.worker_id === 'lead' && e.event_type === 'worker_started')!.seq;
    for (const w of ['researcher-1', 'critic-2']) expect(events.find((e) => e.worker_id === w && e.event_type === 'worker_completed')!.seq).toBeLessThan(leadStart);
    expect(await reconciled('worker_job_lost')).toBe(1);
    expect(await reconciled('lead_job_lost')).toBe(0);
  });

  it('adds again the lost job of a planned lead waiting for its workers: it waits for them again and synthesizes once', async () => {
    await startStack(1);
    const taskId = await createTask({ goal: 'Plan a team [[scripted:spawn=alpha,beta]] [[scripted:delay=1500]]' });
    await waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_phase' && e.worker_id === 'lead' && e.payload.phase === 'waiting_for_workers');
    await waitUntil('the lead\'s job to wait for its children', async () => (await queue.getJobState(agentJobId(taskId, 'lead'))) === 'waiting-children');
    await loseJob(taskId, 'lead');
    await waitUntil('the reconciler to re-drive the task', async () => (await reconciled('lead_job_lost')) === 1);

    const events = await expectCompletedOnce(taskId, ['lead', 'alpha-1', 'beta-2']);
    // The lead's synthesis (its last phase) came after both workers had finished.
    const synthesis = events.findLast((e) => e.worker_id === 'lead' && e.event_type === 'worker_phase')!.seq;
    for (const w of ['alpha-1', 'beta-2']) expect(events.find((e) => e.worker_id === w && e.event_type === 'worker_completed')!.seq).toBeLessThan(synthesis);
    expect(events.filter((e) => e.worker_id === 'lead' && e.event_type === 'worker_completed')).toHaveLength(1);
    expect(await reconciled('lead_job_lost')).toBe(1);
  });
});

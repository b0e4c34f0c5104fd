// A failover can lose BullMQ writes the dying master acknowledged (README "Failover"): a task's jobs live in
// another slot than its record, so the task stays queued or running with nothing left to run it. Here the loss is
// made the way it happens — the job's keys deleted from Redis (its hash, its place in the queue's lists and sets,
// its entry in its lead's dependencies) — on a real stack, and the gateway's task reconciler must bring the task to
// its end: completed, one terminal event, a contiguous log, no worker run twice, the re-drive counted.
import { Queue } from 'bullmq';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AGENT_JOB_OPTIONS, AGENT_QUEUE, KeyBuilder, TeamQueue, agentJobId } from '@cadre/store';
import { assertContiguous, httpClient, pollUntilTerminal, waitForEvent, waitUntil, type TestRedisClient } from '@cadre/testing';
import { expectCompletedOnce, loseJob } from './support/lost-jobs.ts';
import { Scrape } from './support/prometheus.ts';
import { TestStack } from './support/stack.ts';

// A short grace and interval, so a pass comes soon after the loss (both are waited on as conditions, never timed).
const RECONCILE_ENV = { CADRE_ENQUEUE_GRACE_MS: '100', CADRE_TASK_RECONCILE_INTERVAL_MS: '100' };

let stack: TestStack;
let redis: TestRedisClient;
let queue: Queue;

async function startStack(workers: number, env: Record<string, string> = {}): Promise<void> {
  stack = await TestStack.start({ workers, env: { ...RECONCILE_ENV, ...env } });
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

const reconciled = async (reason: string): Promise<number> => (await Scrape.of(`${stack.url}/metrics`)).value('cadre_tasks_reconciled_total', { reason });

describe('task reconciler', () => {
  it('enqueues again a queued task whose lead job was lost before any worker took it', async () => {
    await startStack(0);
    const taskId = await createTask({ goal: 'Plan a team [[scripted:spawn=alpha,beta]]' });
    await loseJob(redis, queue, taskId, 'lead');
    await waitUntil('the reconciler to re-drive the task', async () => (await reconciled('lead_job_lost')) === 1);
    expect(await queue.getJobState(agentJobId(taskId, 'lead'))).toBe('waiting');

    await stack.addWorkerPool();
    await expectCompletedOnce(stack.url, taskId, ['lead', 'alpha-1', 'beta-2']);
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
    await loseJob(redis, queue, taskId, 'critic-2');
    await waitUntil('the reconciler to re-drive the task', async () => (await reconciled('worker_job_lost')) === 1);
    expect(await queue.getJobState(agentJobId(taskId, 'critic-2'))).toBe('waiting');
    expect(await queue.getJobState(agentJobId(taskId, 'lead'))).toBe('waiting-children');

    await stack.addWorkerPool();
    const events = await expectCompletedOnce(stack.url, taskId, ['lead', 'researcher-1', 'critic-2']);
    // The lead synthesized after both workers had finished, the re-added one included.
    const leadStart = events.find((e) => e.worker_id === 'lead' && e.event_type === 'worker_started')!.seq;
    for (const w of ['researcher-1', 'critic-2']) expect(events.find((e) => e.worker_id === w && e.event_type === 'worker_completed')!.seq).toBeLessThan(leadStart);
    expect(await reconciled('worker_job_lost')).toBe(1);
    expect(await reconciled('lead_job_lost')).toBe(0);
  });

  it('lets a lead go on that waits for a failed worker linked to it again: the task completes, one synthesis', async () => {
    await startStack(1);
    const taskId = await createTask({
      goal: 'Weigh two options',
      team: { workers: [{ role: 'broken', instructions: 'Fail. [[scripted:fail=400]]' }, { role: 'steady', instructions: 'Wait. [[scripted:hold=steady]]' }] },
    });
    await stack.model.holding('steady');
    await waitUntil('broken-1\'s job to fail', async () => (await queue.getJobState(agentJobId(taskId, 'broken-1'))) === 'failed');
    // A re-drive whose read said broken-1 was still running (a stale read) links its failed job to the lead again:
    // BullMQ's duplicate rule SADDs it back into the lead's dependencies, where nothing will ever take it out.
    const leadId = agentJobId(taskId, 'lead');
    await queue.addBulk([{
      name: 'worker', data: { taskId, workerId: 'broken-1' },
      opts: { ...AGENT_JOB_OPTIONS, jobId: agentJobId(taskId, 'broken-1'), parent: { id: leadId, queue: queue.qualifiedName }, ignoreDependencyOnFailure: true },
    }]);
    expect(await (await queue.getJob(leadId))!.getDependenciesCount()).toMatchObject({ unprocessed: 2 });
    stack.model.release('steady');

    const events = await pollUntilTerminal(stack.url, taskId, 30_000);
    assertContiguous(events.map((e) => e.seq));
    expect(events.filter((e) => e.event_type.startsWith('task_') && e.event_type !== 'task_queued').map((e) => e.event_type)).toEqual(['task_completed']);
    // One synthesis, after both workers had ended.
    const leadStarts = events.filter((e) => e.worker_id === 'lead' && e.event_type === 'worker_started');
    expect(leadStarts).toHaveLength(1);
    expect(events.filter((e) => e.worker_id === 'lead' && e.event_type === 'worker_completed')).toHaveLength(1);
    expect(events.find((e) => e.worker_id === 'broken-1' && e.event_type === 'worker_failed')!.seq).toBeLessThan(leadStarts[0]!.seq);
    expect(events.find((e) => e.worker_id === 'steady-2' && e.event_type === 'worker_completed')!.seq).toBeLessThan(leadStarts[0]!.seq);
    expect(await reconciled('dependency_ended')).toBe(1);
  });

  it('adds again the lost job of a planned lead waiting for its workers: it waits for them again and synthesizes once', async () => {
    await startStack(1);
    const taskId = await createTask({ goal: 'Plan a team [[scripted:spawn=alpha,beta]] [[scripted:delay=1500]]' });
    await waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_phase' && e.worker_id === 'lead' && e.payload.phase === 'waiting_for_workers');
    await waitUntil('the lead\'s job to wait for its children', async () => (await queue.getJobState(agentJobId(taskId, 'lead'))) === 'waiting-children');
    await loseJob(redis, queue, taskId, 'lead');
    await waitUntil('the reconciler to re-drive the task', async () => (await reconciled('lead_job_lost')) === 1);

    const events = await expectCompletedOnce(stack.url, taskId, ['lead', 'alpha-1', 'beta-2']);
    // The lead's synthesis (its last phase) came after both workers had finished.
    const synthesis = events.findLast((e) => e.worker_id === 'lead' && e.event_type === 'worker_phase')!.seq;
    for (const w of ['alpha-1', 'beta-2']) expect(events.find((e) => e.worker_id === w && e.event_type === 'worker_completed')!.seq).toBeLessThan(synthesis);
    expect(events.filter((e) => e.worker_id === 'lead' && e.event_type === 'worker_completed')).toHaveLength(1);
    expect(await reconciled('lead_job_lost')).toBe(1);
  });

  it('adds again the jobs of a planned team\'s workers lost right after its lead added them: the lead waits for them and synthesizes once', async () => {
    // The pool runs in this process: its lead is held right after its workers' add has landed until the test has
    // deleted their jobs, as a failover that lost that addBulk leaves them. One slot, so no worker runs meanwhile.
    const add = TeamQueue.prototype.addWorkerJobs;
    const added = Promise.withResolvers<void>();
    const lost = Promise.withResolvers<void>();
    let held = false;
    TeamQueue.prototype.addWorkerJobs = async function (this: TeamQueue, ...args: Parameters<typeof add>) {
      await add.apply(this, args);
      if (held) return;
      held = true;
      added.resolve();
      await lost.promise;
    };
    try {
      await startStack(1, { WORKER_CONCURRENCY: '1' });
      const taskId = await createTask({ goal: 'Plan a team [[scripted:spawn=alpha,beta]]' });
      await added.promise;
      for (const w of ['alpha-1', 'beta-2']) await loseJob(redis, queue, taskId, w);
      lost.resolve();

      const events = await expectCompletedOnce(stack.url, taskId, ['lead', 'alpha-1', 'beta-2']);
      // One synthesis, after both workers had finished; the lead re-added their jobs itself, not the reconciler.
      const syntheses = events.filter((e) => e.worker_id === 'lead' && e.event_type === 'worker_phase' && e.payload.phase === 'synthesizing');
      expect(syntheses).toHaveLength(1);
      for (const w of ['alpha-1', 'beta-2']) expect(events.find((e) => e.worker_id === w && e.event_type === 'worker_completed')!.seq).toBeLessThan(syntheses[0]!.seq);
      expect(await reconciled('worker_job_lost')).toBe(0);
      expect(await reconciled('lead_job_lost')).toBe(0);
    } finally {
      lost.resolve();
      TeamQueue.prototype.addWorkerJobs = add;
    }
  });
});

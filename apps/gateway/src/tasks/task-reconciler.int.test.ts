// The task reconciler against a real Redis and real BullMQ jobs, with no worker running them: a healthy task is only
// read (nothing written), a finished worker is never given a job again, young tasks and tasks the enqueue sweeper
// still owns are left alone, passes are bounded and go on where the last one stopped, and two reconcilers at once
// add a lost job once.
import { randomUUID } from 'node:crypto';
import { Queue, Worker, type Job } from 'bullmq';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_QUEUE, KeyBuilder, TaskStore, TeamQueue, agentJobId, connectRedis, type NewTask, type RedisClient, type TaskRecord } from '@cadre/store';
import { assertContiguous, dumpDiff, dumpRedis, startTestRedis, waitUntil, type TestRedis } from '@cadre/testing';
import { TaskReconciler, type TaskReconcilerDeps } from './task-reconciler.ts';

let server: TestRedis;
let redis: RedisClient;
let keys: KeyBuilder;
let store: TaskStore;
let queue: TeamQueue;
let jobs: Queue;

beforeAll(async () => {
  server = await startTestRedis();
  redis = connectRedis(server.url, 'test-task-reconciler');
});
afterAll(async () => {
  await queue?.close();
  await jobs?.close();
  redis?.disconnect();
  await server?.stop();
});

/** A prefix of its own per test: every test sees only its own tasks and jobs. */
async function fresh(): Promise<void> {
  await queue?.close();
  await jobs?.close();
  keys = new KeyBuilder(`rec${randomUUID().slice(0, 8)}`);
  store = new TaskStore({ redis, keys });
  queue = new TeamQueue({ connection: redis, keys, onError: () => undefined });
  jobs = new Queue(AGENT_QUEUE, { connection: redis as never, prefix: keys.bullPrefix() });
}

const reconciler = (opts: Partial<TaskReconcilerDeps> = {}): TaskReconciler =>
  new TaskReconciler({ store, queue, graceMs: 0, intervalMs: 60_000, logger: pino({ level: 'silent' }), ...opts });

/** A task as the gateway creates it: written, listed, its jobs enqueued, its enqueue mark cleared. */
async function createTask(workspaceId: string, workers: string[] = []): Promise<TaskRecord> {
  const input: NewTask = {
    workspace_id: workspaceId, goal: 'g', metadata: {},
    team: { lead: { instructions: 'lead' }, workers: workers.map((role) => ({ role, instructions: role, tools: [] })), max_workers: 4 },
  };
  const { task } = await store.createTask(input);
  await Promise.all([store.listNew(task), queue.enqueueTask(task)]);
  await store.enqueued(task.task_id);
  return task;
}

/** Deletes a job's hash and its id in the queue's lists and sets (a lost add). */
async function loseJob(taskId: string, workerId: string): Promise<void> {
  const jobId = agentJobId(taskId, workerId);
  const k = jobs.keys;
  await redis.multi().del(jobs.toKey(jobId), `${jobs.toKey(jobId)}:dependencies`).lrem(k.wait!, 0, jobId).zrem(k['waiting-children']!, jobId).exec();
}

const stateOf = (taskId: string, workerId: string): Promise<string> => jobs.getJobState(agentJobId(taskId, workerId));

/** Runs the queue's jobs with `processor` (a worker pool's stand-in) until an agent's job is in `state`. */
async function runJobs(processor: (job: Job) => Promise<unknown>, taskId: string, workerId: string, state: string): Promise<void> {
  const worker = new Worker(AGENT_QUEUE, processor, { connection: redis as never, prefix: keys.bullPrefix() });
  try {
    await waitUntil(`${workerId}'s job to be ${state}`, async () => (await stateOf(taskId, workerId)) === state);
  } finally {
    await worker.close();
  }
}
const stalls = async (): Promise<never> => {
  throw new Error('job stalled more than allowable limit');
};
const everyKey = (): Promise<Map<string, string>> => dumpRedis(redis as never, [`${keys.prefix}:*`, `${keys.bullPrefix()}:*`]);

describe('TaskReconciler', () => {
  it('only reads healthy tasks: nothing is re-added, nothing written', async () => {
    await fresh();
    const planned = await createTask('w1');
    const named = await createTask('w1', ['researcher', 'critic']);
    // A named task one of whose workers has finished, its job completed and removed since: not to be given a job again.
    const partly = await createTask('w2', ['researcher', 'critic']);
    await store.claimWorker(partly.task_id, 'researcher-1', 'lease-1', 'host');
    await store.finishWorker(partly.task_id, 'researcher-1', 'lease-1', { outcome: 'completed', result: 'r', usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
    await loseJob(partly.task_id, 'researcher-1');
    expect([await stateOf(planned.task_id, 'lead'), await stateOf(named.task_id, 'lead'), await stateOf(named.task_id, 'critic-2')]).toEqual(['waiting', 'waiting-children', 'waiting']);

    const before = await everyKey();
    expect(before.size).toBeGreaterThan(10);
    const pass = await reconciler().reconcile();
    expect(pass).toEqual({ checked: 3, reconciled: {}, errors: [] });
    expect(dumpDiff(before, await everyKey())).toEqual([]);
  });

  it('re-adds a lost lead as a flow of the workers still to finish, never a finished worker\'s job', async () => {
    await fresh();
    const task = await createTask('w', ['researcher', 'critic']);
    await store.claimWorker(task.task_id, 'researcher-1', 'lease-1', 'host');
    await store.finishWorker(task.task_id, 'researcher-1', 'lease-1', { outcome: 'failed', reason: 'model_error', message: 'm' });
    await loseJob(task.task_id, 'researcher-1');
    await loseJob(task.task_id, 'lead');

    expect(await reconciler().reconcile()).toEqual({ checked: 1, reconciled: { lead_job_lost: [task.task_id] }, errors: [] });
    expect(await stateOf(task.task_id, 'lead')).toBe('waiting-children');
    expect(await stateOf(task.task_id, 'critic-2')).toBe('waiting');
    expect(await stateOf(task.task_id, 'researcher-1')).toBe('unknown');
    expect(await (await jobs.getJob(agentJobId(task.task_id, 'lead')))!.getDependenciesCount()).toMatchObject({ processed: 0, unprocessed: 1 });
  });

  it('leaves alone a task younger than the grace and one the enqueue sweeper still owns', async () => {
    await fresh();
    const young = await createTask('w');
    await loseJob(young.task_id, 'lead');
    expect(await reconciler({ graceMs: 60_000 }).reconcile()).toEqual({ checked: 1, reconciled: {}, errors: [] });
    expect(await stateOf(young.task_id, 'lead')).toBe('unknown');

    // A creation whose gateway died before the enqueue: marked still, so it is the enqueue sweeper's.
    const { task: stranded } = await store.createTask({ workspace_id: 'w', goal: 'g', metadata: {}, team: { lead: { instructions: 'l' }, workers: [], max_workers: 1 } });
    await store.listNew(stranded);
    expect(await reconciler().reconcile()).toEqual({ checked: 2, reconciled: { lead_job_lost: [young.task_id] }, errors: [] });
    expect(await stateOf(stranded.task_id, 'lead')).toBe('unknown');
  });

  it('bounds each pass and goes on where the last one stopped, through every workspace', async () => {
    await fresh();
    const lost: string[] = [];
    for (const ws of ['a', 'b']) {
      for (let i = 0; i < 4; i++) {
        const task = await createTask(ws);
        await loseJob(task.task_id, 'lead');
        lost.push(task.task_id);
      }
    }
    const r = reconciler({ pageSize: 2, maxPerPass: 3 });
    const passes = [await r.reconcile(), await r.reconcile(), await r.reconcile()];
    expect(passes.map((p) => [p.checked, p.reconciled.lead_job_lost?.length ?? 0])).toEqual([[3, 3], [3, 3], [2, 2]]);
    expect(passes.flatMap((p) => p.reconciled.lead_job_lost ?? []).sort()).toEqual([...lost].sort());
    // The next pass starts again at the first workspace and finds nothing left to do.
    expect(await r.reconcile()).toMatchObject({ checked: 3, reconciled: {} });
  });

  it('fails a task whose lead\'s job ended with the task\'s end unrecorded, once that end is overdue', async () => {
    await fresh();
    const task = await createTask('w');
    // The lead runs; its job then fails for good, and the end its worker would write is lost.
    await store.claimWorker(task.task_id, 'lead', 'lease-1', 'host');
    await runJobs(stalls, task.task_id, 'lead', 'failed');
    // Its worker could still be writing the end: not within the grace.
    expect(await reconciler({ graceMs: 60_000 }).reconcile()).toEqual({ checked: 1, reconciled: {}, errors: [] });
    expect(await reconciler().reconcile()).toEqual({ checked: 1, reconciled: { lead_job_ended: [task.task_id] }, errors: [] });

    const ended = (await store.getTask(task.task_id))!;
    expect(ended.status).toBe('failed');
    expect(ended.failure_reason).toBe('lead_job_ended: the lead\'s job failed (job stalled more than allowable limit) but the task\'s end was never recorded (lost with a failover?)');
    const { events } = (await store.readEvents(task.task_id, 0, 100))!;
    assertContiguous(events.map((e) => e.seq));
    expect(events.map((e) => `${e.event_type}:${e.worker_id ?? ''}`)).toEqual(['task_queued:', 'worker_started:lead', 'worker_failed:lead', 'worker_exited:lead', 'task_failed:']);
    expect(events[2]!.payload).toMatchObject({ reason: 'lead_job_ended' });
    // Ended: later passes leave it (it is out of the unfinished set).
    expect(await reconciler().reconcile()).toEqual({ checked: 0, reconciled: {}, errors: [] });
  });

  it('lets a lead go on that waits only for workers ended for good (a failed job linked again, a job gone)', async () => {
    await fresh();
    const task = await createTask('w', ['researcher', 'critic']);
    await store.claimWorker(task.task_id, 'researcher-1', 'lease-1', 'host');
    await store.finishWorker(task.task_id, 'researcher-1', 'lease-1', { outcome: 'completed', result: 'r', usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
    await store.claimWorker(task.task_id, 'critic-2', 'lease-2', 'host');
    await store.finishWorker(task.task_id, 'critic-2', 'lease-2', { outcome: 'failed', reason: 'model_error', message: 'm' });
    // researcher-1's job is gone but still a dependency; critic-2's job fails, then a stale read links it again.
    await loseJob(task.task_id, 'researcher-1');
    await runJobs(stalls, task.task_id, 'critic-2', 'failed');
    await queue.addWorkerJobs(task.task_id, ['critic-2']);
    const lead = async (): Promise<unknown> => (await jobs.getJob(agentJobId(task.task_id, 'lead')))!.getDependenciesCount();
    expect(await lead()).toMatchObject({ unprocessed: 2 });

    // Not within the grace of the lead's wait.
    expect(await reconciler({ graceMs: 60_000 }).reconcile()).toEqual({ checked: 1, reconciled: {}, errors: [] });
    expect(await reconciler().reconcile()).toEqual({ checked: 1, reconciled: { dependency_ended: [task.task_id] }, errors: [] });
    // The failed job is no longer waited for; the gone one is back, to be refused its claim and complete.
    expect(await lead()).toMatchObject({ unprocessed: 1 });
    expect(await stateOf(task.task_id, 'critic-2')).toBe('failed');
    expect(await stateOf(task.task_id, 'researcher-1')).toBe('waiting');
    await runJobs(async (job) => ({ workerId: job.data.workerId, status: 'skipped' }), task.task_id, 'lead', 'completed');
  });

  it('completes a task whose lead\'s job completed its synthesis with the task\'s end unrecorded, with the result it returned', async () => {
    await fresh();
    const task = await createTask('w');
    await store.claimWorker(task.task_id, 'lead', 'lease-1', 'host');
    await runJobs(async () => ({ workerId: 'lead', status: 'completed', result: 'the answer' }), task.task_id, 'lead', 'completed');
    expect(await reconciler().reconcile()).toEqual({ checked: 1, reconciled: { lead_job_completed: [task.task_id] }, errors: [] });
    const ended = (await store.getTask(task.task_id))!;
    expect(ended.status).toBe('completed');
    expect(ended.result).toBe('the answer');
    const { events } = (await store.readEvents(task.task_id, 0, 100))!;
    assertContiguous(events.map((e) => e.seq));
    expect(events.map((e) => e.event_type).filter((t) => t.startsWith('task_'))).toEqual(['task_queued', 'task_completed']);
  });

  it('counts a task that ended between its read and the reconciler\'s write as nothing to do, not an error', async () => {
    await fresh();
    const task = await createTask('w');
    await store.claimWorker(task.task_id, 'lead', 'lease-1', 'host');
    await runJobs(stalls, task.task_id, 'lead', 'failed');
    // The task is cancelled right after the reconciler has read it: its write is refused task_finished.
    const racing = Object.create(store, {
      getTask: { value: async (id: string) => { const read = await store.getTask(id); await store.cancelTask(id, 'a user'); return read; } },
    }) as TaskStore;
    expect(await reconciler({ store: racing }).reconcile()).toEqual({ checked: 1, reconciled: {}, errors: [] });
    expect((await store.getTask(task.task_id))!.status).toBe('cancelled');
  });

  it('takes one turn per cluster per interval, and whichever process takes the next goes on where the last stopped', async () => {
    await fresh();
    const lost: string[] = [];
    for (let i = 0; i < 4; i++) {
      const task = await createTask('w');
      await loseJob(task.task_id, 'lead');
      lost.push(task.task_id);
    }
    const [a, b] = [reconciler({ pageSize: 2, maxPerPass: 3 }), reconciler({ pageSize: 2, maxPerPass: 3 })];
    const first = await a.turn();
    expect(first).toMatchObject({ checked: 3 });
    // The interval (60 s) has not passed: the other gateway, and this one, are refused the turn.
    expect(await b.turn()).toBeNull();
    expect(await a.turn()).toBeNull();
    // The interval over (the turn's key expired), the other gateway goes on with the one task left.
    await redis.del(keys.tasksReconcileTurn());
    const second = await b.turn();
    expect(second).toMatchObject({ checked: 1 });
    expect([...first!.reconciled.lead_job_lost!, ...second!.reconciled.lead_job_lost!].sort()).toEqual([...lost].sort());
  });

  it('passes over a workspace it cannot read and goes on with the next', async () => {
    await fresh();
    const [a, c] = [await createTask('a'), await createTask('c')];
    await Promise.all([loseJob(a.task_id, 'lead'), loseJob(c.task_id, 'lead')]);
    // Workspace b's set cannot be read (here: a key of the wrong type, WRONGTYPE, as a slot without a master fails).
    await redis.sadd(keys.workspaces(), 'b');
    await redis.set(keys.workspaceTasks('b'), 'not a set');
    expect(await reconciler().reconcile()).toEqual({ checked: 2, reconciled: { lead_job_lost: [a.task_id, c.task_id] }, errors: [], failedWorkspaces: ['b'] });
  });

  it('takes an ended task and one whose record is gone out of the unfinished set when it meets them', async () => {
    await fresh();
    const ended = await createTask('w');
    await store.cancelTask(ended.task_id, 'a user');
    // Its set's SREM (a separate write) was lost; another task's record is gone.
    await redis.sadd(keys.workspaceTasks('w'), ended.task_id, 'tsk_gone');
    expect(await reconciler().reconcile()).toEqual({ checked: 2, reconciled: {}, errors: [] });
    expect(await redis.smembers(keys.workspaceTasks('w'))).toEqual([]);
    expect(await reconciler().reconcile()).toEqual({ checked: 0, reconciled: {}, errors: [] });
  });

  it('two reconcilers at once add a lost job once', async () => {
    await fresh();
    const task = await createTask('w', ['researcher']);
    await loseJob(task.task_id, 'researcher-1');
    await Promise.all([reconciler().reconcile(), reconciler().reconcile()]);
    expect((await redis.lrange(jobs.keys.wait!, 0, -1)).filter((id) => id === agentJobId(task.task_id, 'researcher-1'))).toHaveLength(1);
    expect(await stateOf(task.task_id, 'lead')).toBe('waiting-children');
    expect(await (await jobs.getJob(agentJobId(task.task_id, 'lead')))!.getDependenciesCount()).toMatchObject({ processed: 0, unprocessed: 1 });
  });
});

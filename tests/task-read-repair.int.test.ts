// One failover can lose a task's jobs AND its listing (the workspace's unfinished set, the enqueue mark: other slots
// than its record): the task reconciler's walk then never finds it. A client reading it does (read repair): the
// gateway re-drives a stuck task it is asked about and lists it again. A task that is moving costs a read nothing.
// The loss is made by deleting keys, on a real stack.
import { Queue } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { AGENT_QUEUE, KeyBuilder, agentJobId } from '@cadre/store';
import { httpClient, waitForEvent, waitUntil, type TestRedisClient } from '@cadre/testing';
import { expectCompletedOnce, loseJob } from './support/lost-jobs.ts';
import { Scrape } from './support/prometheus.ts';
import { TestStack } from './support/stack.ts';

const WORKSPACE = 'readrepair';
let stack: TestStack | undefined;
let redis: TestRedisClient | undefined;
let queue: Queue | undefined;

async function startStack(workers: number, env: Record<string, string>): Promise<{ stack: TestStack; redis: TestRedisClient; queue: Queue }> {
  stack = await TestStack.start({ workers, env });
  redis = stack.redis.connect();
  queue = new Queue(AGENT_QUEUE, { connection: redis, prefix: new KeyBuilder(stack.prefix).bullPrefix() });
  return { stack, redis, queue };
}
afterEach(async () => {
  await queue?.close();
  redis?.disconnect();
  await stack?.stop();
  stack = redis = queue = undefined;
});

async function createTask(url: string, body: object): Promise<string> {
  const res = await httpClient(url).post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: WORKSPACE, ...body });
  expect(res.status).toBe(201);
  return res.body.task.task_id;
}

const reconciled = async (url: string, labels: Record<string, string>): Promise<number> => (await Scrape.of(`${url}/metrics`)).value('cadre_tasks_reconciled_total', labels);

describe('read repair', () => {
  it('a task whose jobs and listing were both lost is never found by the reconciler, and finishes once a client reads it', async () => {
    const { stack, redis, queue } = await startStack(0, { CADRE_ENQUEUE_GRACE_MS: '100', CADRE_TASK_RECONCILE_INTERVAL_MS: '100' });
    const keys = new KeyBuilder(stack.prefix);
    const stuck = await createTask(stack.url, { goal: 'Plan a team [[scripted:spawn=alpha,beta]]' });
    // A task in the same workspace that keeps its listing: each re-drive of it shows a pass walked the workspace.
    const listed = await createTask(stack.url, { goal: 'Plan another team [[scripted:spawn=gamma]]' });
    await waitUntil('the creations to clear their enqueue marks', async () => (await redis.zcard(keys.tasksEnqueueing())) === 0);
    await loseJob(redis, queue, stuck, 'lead');
    // The enqueue mark is gone already; the listing goes with the jobs.
    await redis.srem(keys.workspaceTasks(WORKSPACE), stuck);
    expect(await redis.zscore(keys.tasksEnqueueing(), stuck)).toBeNull();

    // Two passes over the workspace (each re-drives the listed task's lost lead): the stuck task is not touched.
    for (const pass of [1, 2]) {
      await loseJob(redis, queue, listed, 'lead');
      await waitUntil(`pass ${pass} to re-drive the listed task`, async () => (await reconciled(stack.url, { trigger: 'pass', reason: 'lead_job_lost' })) === pass);
    }
    expect(await queue.getJob(agentJobId(stuck, 'lead'))).toBeUndefined();
    expect(await redis.sismember(keys.workspaceTasks(WORKSPACE), stuck)).toBe(0);
    expect(await reconciled(stack.url, { trigger: 'read' })).toBe(0);

    // One read of the task.
    const read = await httpClient(stack.url).get<{ task: { status: string } }>(`/api/tasks/${stuck}`);
    expect(read.status).toBe(200);
    expect(read.body.task.status).toBe('queued');
    await waitUntil('the read to re-drive the task', async () => (await reconciled(stack.url, { trigger: 'read', reason: 'lead_job_lost' })) === 1);
    expect(await queue.getJobState(agentJobId(stuck, 'lead'))).toBe('waiting');
    await waitUntil('the task to be listed again', async () => (await redis.sismember(keys.workspaceTasks(WORKSPACE), stuck)) === 1);

    await stack.addWorkerPool();
    await expectCompletedOnce(stack.url, stuck, ['lead', 'alpha-1', 'beta-2']);
    await expectCompletedOnce(stack.url, listed, ['lead', 'gamma-1']);
    expect(await reconciled(stack.url, { trigger: 'read' })).toBe(1);
    expect(await redis.sismember(keys.workspaceTasks(WORKSPACE), stuck)).toBe(0);
  });

  it('a task that is moving costs a read nothing: read many times past the grace, it is never checked', async () => {
    // No reconcile pass during the test: every ZMSCORE the server runs is a read repair's check (its enqueue mark).
    const graceMs = 2_000;
    const { stack, redis } = await startStack(1, { CADRE_ENQUEUE_GRACE_MS: String(graceMs), CADRE_TASK_RECONCILE_INTERVAL_MS: '600000' });
    // One worker calling a tool 6 times (7 turns, within the default 8), an answer every 800 ms: an event at least
    // every 800 ms or so, for over 5 s.
    const calls = Array.from({ length: 6 }, (_, i) => `[[scripted:call=calculate({"expression":"${i}+1"})]]`).join(' ');
    const taskId = await createTask(stack.url, {
      goal: 'Count slowly [[scripted:delay=800]]',
      team: { workers: [{ role: 'counter', instructions: `Compute. ${calls}`, tools: ['calculate'] }] },
    });
    const api = httpClient(stack.url);
    const created = Date.parse((await api.get<{ task: { created_at: string } }>(`/api/tasks/${taskId}`)).body.task.created_at);
    await waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_started' && e.worker_id === 'counter-1');
    await waitUntil('the task to be older than the grace', () => Date.now() - created > graceMs);
    const zmscores = async (): Promise<number> => Number(/cmdstat_zmscore:calls=(\d+)/.exec(await redis.info('commandstats'))?.[1] ?? 0);
    const before = await zmscores();

    let readsWhileRunning = 0;
    for (let i = 0; i < 20; i++) {
      const [task] = await Promise.all([
        api.get<{ task: { status: string } }>(`/api/tasks/${taskId}`),
        api.get(`/api/tasks/${taskId}/events?after_seq=0&limit=1000`),
      ]);
      if (task.body.task.status === 'running') readsWhileRunning++;
    }
    expect(readsWhileRunning).toBe(20);
    expect(await zmscores()).toBe(before);
    expect(await reconciled(stack.url, {})).toBe(0);
    await expectCompletedOnce(stack.url, taskId, ['lead', 'counter-1']);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestRedis, type TestRedis, type TestRedisClient } from '@cadre/testing';
import { KeyBuilder } from './keys.ts';
import { StoreError } from './errors.ts';
import { TaskStore } from './task-store.ts';
import { ApprovalStore, newApprovalId } from './approval-store.ts';

let server: TestRedis;
let redis: TestRedisClient;
let store: TaskStore;
let approvals: ApprovalStore;

beforeAll(async () => {
  server = await startTestRedis();
  redis = server.connect();
  const keys = new KeyBuilder(`fence${process.pid}`);
  store = new TaskStore({ redis, keys });
  approvals = new ApprovalStore({ redis, keys });
});
afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
});

const team = { lead: { instructions: 'lead' }, workers: [{ role: 'writer', instructions: 'write', tools: [] }], max_workers: 4 };

async function newTask(): Promise<string> {
  const { task } = await store.createTask({ workspace_id: 'w', goal: 'g', team, metadata: {} });
  return task.task_id;
}

describe('fencing by lease', () => {
  it('refuses every write from an attempt whose lease was taken over, and leaves the log untouched', async () => {
    const taskId = await newTask();
    const first = await store.claimWorker(taskId, 'writer-1', 'lease-A', 'host-a');
    expect(first).toMatchObject({ kind: 'started', attempt: 1, worker: { worker_id: 'writer-1', role: 'writer', status: 'running' } });
    // The claim hands the job its task context, so it needs no further reads.
    expect(first.task).toEqual({ task_id: taskId, workspace_id: 'w', goal: 'g', mode: 'named', team });
    await store.appendWorkerEvent(taskId, 'writer-1', 'lease-A', 'worker_phase', { phase: 'thinking', mode: 'react', turn: 1 });

    // Lease A's lock expired; another process took the job with lease B.
    expect(await store.claimWorker(taskId, 'writer-1', 'lease-B', 'host-b')).toMatchObject({ kind: 'started', attempt: 2 });
    const before = await store.readEvents(taskId, 0, 100);

    const stale = [
      store.appendWorkerEvent(taskId, 'writer-1', 'lease-A', 'worker_phase', { phase: 'thinking', mode: 'react', turn: 2 }),
      store.finishWorker(taskId, 'writer-1', 'lease-A', { outcome: 'completed', result: 'stale', usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }),
    ];
    for (const write of stale) {
      await expect(write).rejects.toMatchObject({ code: 'lease_lost' });
    }
    const after = await store.readEvents(taskId, 0, 100);
    expect(after!.events).toEqual(before!.events);
    expect(after!.events.map((e) => `${e.seq}:${e.event_type}:${e.worker_id ?? ''}#${e.attempt}`)).toEqual([
      '1:task_queued:#0',
      '2:worker_started:writer-1#1',
      '3:worker_phase:writer-1#1',
      '4:worker_failed:writer-1#1',
      '5:worker_exited:writer-1#1',
      '6:worker_started:writer-1#2',
    ]);
    const worker = await store.getWorker(taskId, 'writer-1');
    expect(worker).toMatchObject({ status: 'running', attempt: 2, lease: 'lease-B', host_id: 'host-b' });

    // The holder of the lease can still finish.
    await store.finishWorker(taskId, 'writer-1', 'lease-B', { outcome: 'completed', result: 'done', usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
    expect(await store.getWorker(taskId, 'writer-1')).toMatchObject({ status: 'completed', result: 'done' });
  });

  it("the lead's claim carries the roster as getTask shows it (its workers' results); a worker's claim does not", async () => {
    const taskId = await newTask();
    const worker = await store.claimWorker(taskId, 'writer-1', 'W', 'h');
    expect(worker.team).toBeUndefined();
    const usage = { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 };
    await store.finishWorker(taskId, 'writer-1', 'W', { outcome: 'completed', result: 'draft', usage });
    const lead = await store.claimWorker(taskId, 'lead', 'L', 'h');
    expect(lead.team).toEqual((await store.getTask(taskId))!.workers);
    expect(lead.team!.map((w) => [w.worker_id, w.status, w.result, w.usage])).toEqual([
      ['lead', 'running', null, null],
      ['writer-1', 'completed', 'draft', usage],
    ]);
  });

  it("a worker's claim appends its first phase for a new attempt with nothing parked, and only then", async () => {
    const taskId = await newTask();
    const phase = { phase: 'thinking', mode: 'react', turn: 1 } as const;
    const logged = async (): Promise<string[]> => (await store.readEvents(taskId, 0, 100))!.events.map((e) => `${e.event_type}#${e.attempt}`);
    expect((await store.claimWorker(taskId, 'writer-1', 'A', 'h', phase)).firstPhaseLogged).toBe(true);
    expect(await logged()).toEqual(['task_queued#0', 'worker_started#1', 'worker_phase#1']);
    // The same lease again (held: a claim ioredis sent again after a lost reply): nothing new, and the phase its
    // first run appended is reported, so the loop does not append it twice.
    expect(await store.claimWorker(taskId, 'writer-1', 'A', 'h', phase)).toMatchObject({ kind: 'held', firstPhaseLogged: true });
    // Parked on an approval, then woken: it resumes its transcript (handed over by the claim) at its tool calls.
    const now = Date.now();
    const ask = {
      approval_id: newApprovalId(taskId), workspace_id: 'w', task_id: taskId, worker_id: 'writer-1', call_id: 'c1', tool_name: 'calculate',
      arguments: '{}', reason: 'asks', timeout_secs: 60, status: 'pending' as const, created_at: now, expires_at: now + 60_000, order: 0,
    };
    const state = { resume: { turns: 1 }, approval_ids: [ask.approval_id] };
    await approvals.park(taskId, 'writer-1', 'A', state, [ask]);
    expect(await store.claimWorker(taskId, 'writer-1', 'B', 'h', phase)).toMatchObject({ kind: 'resumed', parked: state, firstPhaseLogged: false });
    expect(await store.claimWorker(taskId, 'writer-1', 'B', 'h', phase)).toMatchObject({ kind: 'held', firstPhaseLogged: false });
    // That attempt is lost; the next one is new but resumes the same transcript: no turn 1 to log.
    expect(await store.claimWorker(taskId, 'writer-1', 'C', 'h', phase)).toMatchObject({ kind: 'started', attempt: 2, parked: state, firstPhaseLogged: false });
    expect(await logged()).toEqual([
      'task_queued#0', 'worker_started#1', 'worker_phase#1', 'worker_approval_requested#1', 'worker_failed#1', 'worker_exited#1', 'worker_started#2',
    ]);
  });

  it('closes the task atomically with the lead, expires its keys, and refuses writes after the end', async () => {
    const taskId = await newTask();
    await store.claimWorker(taskId, 'lead', 'L', 'h');
    const usage = { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 };
    await store.finishWorker(taskId, 'lead', 'L', { outcome: 'completed', result: 'answer', usage }, { status: 'completed', result: 'answer', usage });
    const task = await store.getTask(taskId);
    expect(task).toMatchObject({ status: 'completed', result: 'answer', usage });
    const keys = store.keys.task(taskId);
    for (const key of [keys.meta, keys.events, keys.roster]) expect(await redis.ttl(key)).toBeGreaterThan(6 * 24 * 3600);
    await expect(store.claimWorker(taskId, 'writer-1', 'W', 'h')).rejects.toBeInstanceOf(StoreError);
    await expect(store.cancelTask(taskId, 'late')).rejects.toMatchObject({ code: 'task_finished' });
    const page = await store.readEvents(taskId, 0, 100);
    expect(page!.events.map((e) => e.event_type)).toEqual(['task_queued', 'worker_started', 'worker_completed', 'worker_exited', 'task_completed']);
  });

  it('returns the first task for a repeated idempotency key', async () => {
    const input = { workspace_id: 'w', goal: 'once', team, metadata: {} };
    const a = await store.createTask(input, 'key-1');
    const b = await store.createTask(input, 'key-1');
    expect(a.created).toBe(true);
    expect(b.created).toBe(false);
    expect(b.task.task_id).toBe(a.task.task_id);
    expect(b.task.last_seq).toBe(1);
  });
});

describe('scripts', () => {
  it('run as one Functions library, loaded again when the server has lost it (a restart without persistence, a failover)', async () => {
    await newTask();
    // Not defined as ioredis commands: those are copied onto every pipeline the connection builds.
    expect('createTask' in redis).toBe(false);
    const masters = 'nodes' in redis ? redis.nodes('master') : [redis];
    const libraries = async () => (await Promise.all(masters.map((node) => node.call('FUNCTION', 'LIST') as Promise<unknown[]>))).flat();
    expect(await libraries()).not.toEqual([]);
    // What a restarted server without persistence holds: no library (FUNCTION FLUSH reaches each master's replicas).
    await Promise.all(masters.map((node) => node.call('FUNCTION', 'FLUSH')));
    expect(await libraries()).toEqual([]);
    // Several at once, as a busy process's calls meet a restarted server: each loads it, all but one find it loaded.
    const created = await Promise.all([1, 2, 3].map((i) => store.createTask({ workspace_id: 'w', goal: `after a flush ${i}`, team, metadata: {} })));
    for (const [i, { task }] of created.entries()) expect((await store.getTask(task.task_id))?.goal).toBe(`after a flush ${i + 1}`);
    expect(JSON.stringify(await libraries())).toMatch(/"cadre_[0-9a-f]{12}"/);
  });
});

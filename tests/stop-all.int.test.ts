import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_API_KEY, assertContiguous, httpClient, runsCall, waitUntil } from '@cadre/testing';
import { TestStack } from './support/stack.ts';

// The emergency stop across two workspaces that each have runs in every active state and running team tasks.
// Runs are driven by a seed-style VM worker over plain HTTP; tasks run on a real worker pool.

const RUNS_KEY = 'stop-all-test-key';
const CONTROL_KEY = 'stop-all-control-key';
let stack: TestStack;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 1, env: { RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: CONTROL_KEY, RUNS_MAX_ACTIVE_PER_WORKSPACE: '1000', RUNS_HEARTBEAT_INTERVAL_MS: '100' } });
});
afterAll(async () => {
  await stack?.stop();
});

type Res = { status: number; body: Record<string, any> };

const call = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Res> => runsCall(stack.url, RUNS_KEY, method, path, body, headers);

/** stop-all as an operator sends it: the control key alone (as the original). */
const stopAll = (body?: unknown): Promise<Res> => runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/stop-all', body, { 'x-windie-runs-key': null, 'x-windie-runs-control-key': CONTROL_KEY });

const tasks = () => httpClient(stack.url, TEST_API_KEY);

async function createRun(ws: string): Promise<string> {
  const res = await call('POST', '/api/runs/', { workspace_id: ws, query: 'work' });
  expect(res.status).toBe(200);
  return res.body.run.run_id;
}

const heartbeat = (ws: string, workerId: string, extra: Record<string, unknown> = {}): Promise<Res> =>
  call('POST', '/api/runs/workers/heartbeat', { workspace_id: ws, worker_id: workerId, status: 'ready', ...extra });

const snapshot = async (runId: string) => ({
  run: (await call('GET', `/api/runs/${runId}`)).body,
  events: (await call('GET', `/api/runs/${runId}/events?limit=1000`)).body.events,
});

async function createTask(ws: string): Promise<string> {
  const res = await tasks().post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: ws, goal: 'Think [[scripted:delay=20000]]' });
  expect(res.status).toBe(201);
  return res.body.task.task_id;
}

async function taskStatus(taskId: string): Promise<string> {
  return (await tasks().get<{ task: { status: string } }>(`/api/tasks/${taskId}`)).body.task.status;
}

async function taskEvents(taskId: string): Promise<{ seq: number; event_type: string }[]> {
  return (await tasks().get<{ events: { seq: number; event_type: string }[] }>(`/api/tasks/${taskId}/events?limit=1000`)).body.events;
}

async function waitRunning(taskId: string): Promise<void> {
  await waitUntil(`task ${taskId} to start`, async () => (await taskStatus(taskId)) === 'running');
}

/** A workspace with a running, an assigned (queued), a paused and an awaiting run, and two running tasks. */
async function populate(ws: string) {
  const running = await createRun(ws);
  expect((await heartbeat(ws, `${ws}-vm-run`)).body.assigned_run.run_id).toBe(running);
  expect((await call('POST', `/api/runs/${running}/worker-dispatched`, { worker_id: `${ws}-vm-run` })).body.run.status).toBe('running');
  const assigned = await createRun(ws);
  expect((await heartbeat(ws, `${ws}-vm-assigned`)).body.assigned_run.run_id).toBe(assigned);
  const paused = await createRun(ws);
  expect((await call('POST', `/api/runs/${paused}/control`, { action: 'pause' })).body.run.status).toBe('paused');
  const awaiting = await createRun(ws);
  const done = await createRun(ws);
  await call('POST', `/api/runs/${done}/control`, { action: 'stop' });
  const taskIds = [await createTask(ws), await createTask(ws)];
  for (const id of taskIds) await waitRunning(id);
  return { runIds: [running, assigned, paused, awaiting].sort(), finishedRun: done, taskIds: taskIds.sort(), workers: { run: `${ws}-vm-run`, assigned: `${ws}-vm-assigned` }, running, assigned };
}

describe('stop-all', () => {
  it('stops exactly the runs and tasks in scope, tells bound workers, and is harmless to repeat', async () => {
    const ws1 = `ws1-${randomUUID().slice(0, 6)}`;
    const ws2 = `ws2-${randomUUID().slice(0, 6)}`;
    const a = await populate(ws1);
    const b = await populate(ws2);
    const ws2Before = await Promise.all(b.runIds.map(snapshot));

    const scoped = await stopAll({ workspace_id: ws1, requested_by: 'operator' });
    expect(scoped.status).toBe(200);
    expect(scoped.body).toEqual({ workspace_id: ws1, stopped_run_ids: a.runIds, count: 4, stopped_task_ids: a.taskIds });

    // ws1: every active run stopped, with run-control (stop) last; the finished one untouched.
    for (const runId of a.runIds) {
      const { run, events } = await snapshot(runId);
      expect(run.status).toBe('stopped');
      expect(run.finished_at).not.toBeNull();
      assertContiguous(events.map((e: any) => e.seq));
      expect(events.at(-1)).toMatchObject({ event_type: 'run-control', source: 'api', payload: { action: 'stop', requested_by: 'operator', status: 'stopped', bulk: true } });
    }
    // Bound workers get a stop command on their next heartbeat (legacy: once), and no new work.
    for (const [worker, runId] of [[a.workers.run, a.running], [a.workers.assigned, a.assigned]] as const) {
      const hb = await heartbeat(ws1, worker, { status: 'running' });
      expect(hb.body.control_commands).toEqual([expect.objectContaining({ run_id: runId, action: 'stop', requested_by: 'operator' })]);
      expect(hb.body.assigned_run).toBeNull();
      expect((await heartbeat(ws1, worker)).body.control_commands).toEqual([]);
    }
    // ws1's tasks are cancelled through task cancel: task_cancelled last, nothing after it.
    for (const taskId of a.taskIds) {
      expect(await taskStatus(taskId)).toBe('cancelled');
      const events = await taskEvents(taskId);
      assertContiguous(events.map((e) => e.seq));
      expect(events.at(-1)!.event_type).toBe('task_cancelled');
    }
    // ws2 untouched: runs byte-for-byte, tasks still running.
    expect(await Promise.all(b.runIds.map(snapshot))).toEqual(ws2Before);
    for (const taskId of b.taskIds) expect(await taskStatus(taskId)).toBe('running');
    expect((await heartbeat(ws2, b.workers.run, { status: 'running' })).body.control_commands).toEqual([]);

    // Repeating the scoped stop is harmless.
    expect((await stopAll({ workspace_id: ws1 })).body).toEqual({ workspace_id: ws1, stopped_run_ids: [], count: 0, stopped_task_ids: [] });

    // Without a workspace: everything else (here, ws2).
    const all = await stopAll({ requested_by: 'operator' });
    expect(all.status).toBe(200);
    expect(all.body).toEqual({ workspace_id: null, stopped_run_ids: b.runIds, count: 4, stopped_task_ids: b.taskIds });
    for (const runId of b.runIds) expect((await snapshot(runId)).run.status).toBe('stopped');
    for (const taskId of b.taskIds) {
      expect(await taskStatus(taskId)).toBe('cancelled');
      expect((await taskEvents(taskId)).at(-1)!.event_type).toBe('task_cancelled');
    }
    expect((await heartbeat(ws2, b.workers.assigned, { acked_command_ids: [] })).body.control_commands).toEqual([expect.objectContaining({ run_id: b.assigned, action: 'stop' })]);

    // Repeats (with a body, with none) change nothing.
    const logs = await Promise.all([...a.runIds, ...b.runIds].map(snapshot));
    const taskLogs = await Promise.all([...a.taskIds, ...b.taskIds].map(taskEvents));
    expect((await stopAll({})).body).toEqual({ workspace_id: null, stopped_run_ids: [], count: 0, stopped_task_ids: [] });
    expect((await stopAll()).body).toEqual({ workspace_id: null, stopped_run_ids: [], count: 0, stopped_task_ids: [] });
    await stack.loopsIdle(); // aborted task loops must not write after their terminal event, nor once they have returned
    expect(await Promise.all([...a.runIds, ...b.runIds].map(snapshot))).toEqual(logs);
    expect(await Promise.all([...a.taskIds, ...b.taskIds].map(taskEvents))).toEqual(taskLogs);
    // Stopped runs cannot be revived or completed: a late streaming-complete is recorded, the run stays stopped.
    const late = await call('POST', `/api/runs/${a.running}/events`, { event_type: 'streaming-complete' });
    expect(late.status).toBe(200);
    expect(late.body.run.status).toBe('stopped');
    expect((await call('POST', `/api/runs/${a.running}/control`, { action: 'resume' })).status).toBe(409);
  });

  it('cancels tasks of a workspace that has no runs, and ignores unknown workspaces', async () => {
    const ws = `ws3-${randomUUID().slice(0, 6)}`;
    const taskId = await createTask(ws);
    await waitRunning(taskId);
    expect((await stopAll({ workspace_id: `nobody-${randomUUID().slice(0, 6)}` })).body).toMatchObject({ count: 0, stopped_run_ids: [], stopped_task_ids: [] });
    expect(await taskStatus(taskId)).toBe('running');
    expect((await stopAll({})).body).toMatchObject({ workspace_id: null, count: 0, stopped_task_ids: [taskId] });
    expect(await taskStatus(taskId)).toBe('cancelled');
  });

  it('refuses malformed bodies with 422, stopping nothing', async () => {
    const ws = `ws4-${randomUUID().slice(0, 6)}`;
    const runId = await createRun(ws);
    for (const body of [{ workspace_id: '' }, { workspace_id: ws, surprise: true }, { workspace_id: 7 }, [ws]]) {
      const res = await stopAll(body);
      expect(res.status, JSON.stringify(body)).toBe(422);
      expect(res.body.error).toMatchObject({ code: 'invalid_argument' });
    }
    expect((await snapshot(runId)).run.status).toBe('awaiting_worker');
    await stopAll({ workspace_id: ws });
  });

  it('measures stop-all of 200 active runs (printed, not asserted)', async () => {
    const ws = `bench-${randomUUID().slice(0, 6)}`;
    const ids: string[] = [];
    for (let i = 0; i < 200; i += 20) ids.push(...(await Promise.all(Array.from({ length: 20 }, () => createRun(ws)))));
    // Some bound, some running, the rest awaiting.
    for (let i = 0; i < 20; i++) {
      const hb = await heartbeat(ws, `bench-vm-${i}`);
      if (i % 2 === 0) await call('POST', `/api/runs/${hb.body.assigned_run.run_id}/worker-dispatched`, { worker_id: `bench-vm-${i}` });
    }
    const started = performance.now();
    const res = await stopAll({ workspace_id: ws, requested_by: 'bench' });
    const ms = performance.now() - started;
    expect(res.status).toBe(200);
    expect(res.body.count).toBe(200);
    expect(res.body.stopped_run_ids).toEqual([...ids].sort());
    console.log(`[stop-all] 200 active runs (20 bound, 10 running) stopped in ${ms.toFixed(1)} ms`);
    const again = performance.now();
    expect((await stopAll({ workspace_id: ws })).body.count).toBe(0);
    console.log(`[stop-all] repeat on the same workspace: ${(performance.now() - again).toFixed(1)} ms`);
  });
});

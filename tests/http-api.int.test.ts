import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertContiguous, httpClient, pollUntilTerminal, waitForEvent, waitUntil, type ApiResponse } from '@cadre/testing';
import type { TeamEvent } from '@cadre/protocol';
import { TestStack } from './support/stack.ts';

// The tasks API as a user sees it over a real port: status codes, error bodies, the data left in Redis.

interface Task {
  task_id: string;
  workspace_id: string;
  goal: string;
  status: string;
  metadata: Record<string, unknown>;
  last_seq: number;
  workers: { worker_id: string; role: string; status: string; attempt: number; result: string | null }[];
}
interface ErrorBody {
  error: { code: string; message: string };
}
interface EventsPage {
  task_id: string;
  events: TeamEvent[];
  next_after_seq: number;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let stack: TestStack;
let redis: Redis;
let api: ReturnType<typeof httpClient>;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 1 });
  redis = new Redis(stack.redis.url);
  api = httpClient(stack.url);
});
afterAll(async () => {
  await redis?.quit();
  await stack?.stop();
});

const newWorkspace = (): string => `ws-${randomUUID().slice(0, 8)}`;

/** Every key of this stack (Cadre's and BullMQ's), minus BullMQ's own timer key that an idle worker refreshes. */
async function keySnapshot(): Promise<string[]> {
  const keys = [...(await redis.keys(`${stack.prefix}:*`)), ...(await redis.keys(`{${stack.prefix}:bull}:*`))];
  return keys.filter((k) => !k.endsWith(':stalled-check')).sort();
}

/** Runs `request` and asserts it left Redis exactly as it was. */
async function expectNothingWritten<T>(request: () => Promise<T>): Promise<T> {
  const before = await keySnapshot();
  const result = await request();
  expect(await keySnapshot()).toEqual(before);
  return result;
}

/** The ids of the tasks stored for one workspace. */
async function tasksOf(workspaceId: string): Promise<string[]> {
  const metas = await redis.keys(`${stack.prefix}:{t:*}:meta`);
  const ids: string[] = [];
  for (const meta of metas) {
    const [ws, id] = await redis.hmget(meta, 'workspace_id', 'task_id');
    if (ws === workspaceId && id) ids.push(id);
  }
  return ids;
}

function expectError(res: ApiResponse<unknown>, status: number, code: string, mentions: RegExp): void {
  expect({ status: res.status, body: res.body }).toEqual({ status, body: { error: { code, message: expect.stringMatching(mentions) } } });
}

async function createTask(body: Record<string, unknown>, headers?: Record<string, string>): Promise<ApiResponse<{ task: Task }>> {
  return api.post<{ task: Task }>('/api/tasks', body, headers);
}

describe('POST /api/tasks rejects bad input and writes nothing', () => {
  // These run first, while no task is in flight, so the key snapshot of the whole stack is stable.
  const valid = (): Record<string, unknown> => ({ workspace_id: newWorkspace(), goal: 'Weigh two options' });

  it('answers malformed JSON with 400', async () => {
    const res = await expectNothingWritten(() => api.request<ErrorBody>('POST', '/api/tasks', '{"workspace_id": "ws", "goal": '));
    expectError(res, 400, 'invalid_argument', /JSON/i);
  });

  it('answers an empty JSON body and a __proto__ key with 400', async () => {
    const empty = await expectNothingWritten(() => api.request<ErrorBody>('POST', '/api/tasks', ''));
    expectError(empty, 400, 'invalid_argument', /empty/i);
    const poisoned = await expectNothingWritten(() =>
      api.request<ErrorBody>('POST', '/api/tasks', '{"workspace_id":"ws","goal":"g","__proto__":{"admin":true}}'),
    );
    expectError(poisoned, 400, 'invalid_argument', /./);
  });

  it('answers a body that is not JSON with 415 and one over the body limit with 413', async () => {
    const form = await expectNothingWritten(() => api.request('POST', '/api/tasks', 'goal=x', { 'content-type': 'application/x-www-form-urlencoded' }));
    expectError(form, 415, 'unsupported_media_type', /x-www-form-urlencoded/);
    // JSON text sent as text/plain too (Fastify's default would parse it as a string).
    const text = await expectNothingWritten(() => api.request('POST', '/api/tasks', '{"goal":"x"}', { 'content-type': 'text/plain' }));
    expectError(text, 415, 'unsupported_media_type', /^unsupported content-type "text\/plain"; send application\/json$/);
    const huge = await expectNothingWritten(() => createTask({ workspace_id: newWorkspace(), goal: 'g', metadata: { blob: 'z'.repeat(1024 * 1024) } }));
    expectError(huge, 413, 'payload_too_large', /./);
  });

  it('answers a body that is not an object with 400', async () => {
    for (const raw of ['null', '[]', '"goal"', '42']) {
      const res = await expectNothingWritten(() => api.request<ErrorBody>('POST', '/api/tasks', raw));
      expectError(res, 400, 'invalid_argument', /body/);
    }
  });

  it('answers a missing goal or workspace_id with 400 naming the field', async () => {
    const noGoal = await expectNothingWritten(() => createTask({ workspace_id: newWorkspace() }));
    expectError(noGoal, 400, 'invalid_argument', /goal/);
    const noWorkspace = await expectNothingWritten(() => createTask({ goal: 'Weigh two options' }));
    expectError(noWorkspace, 400, 'invalid_argument', /workspace_id/);
  });

  it('answers an empty goal with 400', async () => {
    const res = await expectNothingWritten(() => createTask({ ...valid(), goal: '' }));
    expectError(res, 400, 'invalid_argument', /goal/);
  });

  it('answers a goal over 20000 characters with 400', async () => {
    const res = await expectNothingWritten(() => createTask({ ...valid(), goal: 'x'.repeat(20_001) }));
    expectError(res, 400, 'invalid_argument', /goal.*20000/);
  });

  it('answers an unknown top-level field with 400 naming it', async () => {
    const res = await expectNothingWritten(() => createTask({ ...valid(), priority: 'high' }));
    expectError(res, 400, 'invalid_argument', /priority/);
  });

  it('answers an unknown field inside team.workers with 400 naming it', async () => {
    const res = await expectNothingWritten(() => createTask({ ...valid(), team: { workers: [{ role: 'critic', temperature: 2 }] } }));
    expectError(res, 400, 'invalid_argument', /temperature/);
  });

  it('does not coerce types: goal 123, workspace_id true, max_workers "2" are 400', async () => {
    const goal = await expectNothingWritten(() => createTask({ ...valid(), goal: 123 }));
    expectError(goal, 400, 'invalid_argument', /goal.*string/);
    const workspace = await expectNothingWritten(() => createTask({ ...valid(), workspace_id: true }));
    expectError(workspace, 400, 'invalid_argument', /workspace_id.*string/);
    const maxWorkers = await expectNothingWritten(() => createTask({ ...valid(), team: { max_workers: '2' } }));
    expectError(maxWorkers, 400, 'invalid_argument', /max_workers.*integer/);
  });

  it('answers metadata that is not an object with 400', async () => {
    for (const metadata of ['tag', [1, 2], 7, null]) {
      const res = await expectNothingWritten(() => createTask({ ...valid(), metadata }));
      expectError(res, 400, 'invalid_argument', /metadata.*object/);
    }
  });

  it('answers a workspace_id that is not a plain name with 400', async () => {
    const res = await expectNothingWritten(() => createTask({ ...valid(), workspace_id: 'a:b/{c}' }));
    expectError(res, 400, 'invalid_argument', /workspace_id/);
  });

  it('answers a worker without a role with 400', async () => {
    const res = await expectNothingWritten(() => createTask({ ...valid(), team: { workers: [{ instructions: 'List the pros.' }] } }));
    expectError(res, 400, 'invalid_argument', /role/);
  });

  it('answers a worker with an unknown tool with 422 naming the tool', async () => {
    const res = await expectNothingWritten(() =>
      createTask({ ...valid(), team: { workers: [{ role: 'researcher', tools: ['calculate', 'rm_rf'] }] } }),
    );
    expectError(res, 422, 'unprocessable', /team\.workers.*rm_rf/);
  });

  it('answers more workers than max_workers with 422', async () => {
    const workers = [{ role: 'a' }, { role: 'b' }, { role: 'c' }];
    const res = await expectNothingWritten(() => createTask({ ...valid(), team: { workers, max_workers: 2 } }));
    expectError(res, 422, 'unprocessable', /max_workers/);
  });

  it('answers more workers than the default max_workers (8) with 422', async () => {
    const workers = Array.from({ length: 9 }, (_, i) => ({ role: `r${i}` }));
    const res = await expectNothingWritten(() => createTask({ ...valid(), team: { workers } }));
    expectError(res, 422, 'unprocessable', /max_workers is 8/);
  });

  it('answers an empty or oversized Idempotency-Key with 400', async () => {
    for (const key of ['', 'k'.repeat(256)]) {
      const res = await expectNothingWritten(() => createTask(valid(), { 'idempotency-key': key }));
      expectError(res, 400, 'invalid_argument', /Idempotency-Key/);
    }
  });
});

describe('POST /api/tasks and GET /api/tasks/:task_id', () => {
  it('creates a queued task (201) whose roster GET shows', async () => {
    const workspace = newWorkspace();
    const res = await createTask({
      workspace_id: workspace,
      goal: 'Weigh two options',
      team: { workers: [{ role: 'researcher', instructions: 'List the pros.' }, { role: 'critic', tools: ['calculate'] }] },
      metadata: { ticket: 'T-1', nested: { a: [1, 2] } },
    });
    expect(res.status).toBe(201);
    expect(res.body.task.task_id).toMatch(UUID);
    expect(res.body.task.status).toBe('queued');
    expect(res.body.task).toMatchObject({ workspace_id: workspace, goal: 'Weigh two options', metadata: { ticket: 'T-1', nested: { a: [1, 2] } } });
    expect(await tasksOf(workspace)).toEqual([res.body.task.task_id]);
    // The snapshot the bad-input tests compare sees both the task's keys and its queued jobs.
    const keys = await keySnapshot();
    expect(keys).toContain(`${stack.prefix}:{t:${res.body.task.task_id}}:events`);
    expect(keys.some((k) => k.startsWith(`{${stack.prefix}:bull}:`))).toBe(true);

    const got = await api.get<{ task: Task }>(`/api/tasks/${res.body.task.task_id}`);
    expect(got.status).toBe(200);
    expect(got.body.task.task_id).toBe(res.body.task.task_id);
    expect(got.body.task.workers.map((w) => [w.worker_id, w.role])).toEqual([
      ['lead', 'lead'],
      ['researcher-1', 'researcher'],
      ['critic-2', 'critic'],
    ]);
    for (const w of got.body.task.workers) expect(Object.keys(w)).toEqual(expect.arrayContaining(['worker_id', 'role', 'status', 'attempt', 'result']));
    await pollUntilTerminal(stack.url, res.body.task.task_id);
  });

  it('accepts a goal of exactly 20000 characters', async () => {
    const res = await createTask({ workspace_id: newWorkspace(), goal: 'y'.repeat(20_000) });
    expect(res.status).toBe(201);
    await pollUntilTerminal(stack.url, res.body.task.task_id);
  });

  it('answers a non-UUID task id with 400 and an unknown UUID with 404', async () => {
    for (const path of ['/api/tasks/not-a-uuid', '/api/tasks/not-a-uuid/events', "/api/tasks/1'%20OR%201=1"]) {
      expectError(await api.get(path), 400, 'invalid_argument', /task_id must be a UUID/);
    }
    expectError(await api.post('/api/tasks/not-a-uuid/cancel'), 400, 'invalid_argument', /task_id must be a UUID/);
    const unknown = randomUUID();
    for (const path of [`/api/tasks/${unknown}`, `/api/tasks/${unknown}/events`]) {
      expectError(await api.get(path), 404, 'not_found', new RegExp(`task ${unknown} not found`));
    }
    const cancel = await expectNothingWritten(() => api.post(`/api/tasks/${unknown}/cancel`));
    expectError(cancel, 404, 'not_found', /not found/);
  });
});

describe('Idempotency-Key', () => {
  it('returns the first task for a repeated key: 201 then 200, one task stored', async () => {
    const workspace = newWorkspace();
    const body = { workspace_id: workspace, goal: 'Weigh two options' };
    const key = `idem-${randomUUID()}`;
    const first = await createTask(body, { 'idempotency-key': key });
    const second = await createTask(body, { 'idempotency-key': key });
    expect(first.status).toBe(201);
    expect(second.status).toBe(200);
    expect(second.body.task.task_id).toBe(first.body.task.task_id);
    expect(await tasksOf(workspace)).toEqual([first.body.task.task_id]);
    await pollUntilTerminal(stack.url, first.body.task.task_id);
    // Still the same task once it has finished.
    const third = await createTask(body, { 'idempotency-key': key });
    expect(third.status).toBe(200);
    expect(third.body.task).toMatchObject({ task_id: first.body.task.task_id, status: 'completed' });
    expect(await tasksOf(workspace)).toEqual([first.body.task.task_id]);
  });

  it('scopes keys to the workspace: the same key in another workspace creates another task', async () => {
    const key = `idem-${randomUUID()}`;
    const [wsA, wsB] = [newWorkspace(), newWorkspace()];
    const a = await createTask({ workspace_id: wsA, goal: 'Weigh two options' }, { 'idempotency-key': key });
    const b = await createTask({ workspace_id: wsB, goal: 'Weigh two options' }, { 'idempotency-key': key });
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(b.body.task.task_id).not.toBe(a.body.task.task_id);
    expect(await tasksOf(wsA)).toEqual([a.body.task.task_id]);
    expect(await tasksOf(wsB)).toEqual([b.body.task.task_id]);
    await pollUntilTerminal(stack.url, a.body.task.task_id);
    await pollUntilTerminal(stack.url, b.body.task.task_id);
  });

  it('does not claim the key when the request is rejected', async () => {
    const workspace = newWorkspace();
    const key = `idem-${randomUUID()}`;
    const rejected = await createTask({ workspace_id: workspace, goal: 'x', team: { workers: [{ role: 'r', tools: ['nope'] }] } }, { 'idempotency-key': key });
    expect(rejected.status).toBe(422);
    const accepted = await createTask({ workspace_id: workspace, goal: 'Weigh two options' }, { 'idempotency-key': key });
    expect(accepted.status).toBe(201);
    await pollUntilTerminal(stack.url, accepted.body.task.task_id);
  });
});

describe('GET /api/tasks/:task_id/events', () => {
  let taskId: string;
  let all: TeamEvent[];
  beforeAll(async () => {
    const res = await createTask({
      workspace_id: newWorkspace(),
      goal: 'Weigh two options',
      team: { workers: [{ role: 'researcher', instructions: 'List the pros. [[scripted:call=calculate({"expression":"6*7"})]]', tools: ['calculate'] }, { role: 'critic' }] },
    });
    taskId = res.body.task.task_id;
    all = await pollUntilTerminal(stack.url, taskId);
  });

  it('answers limit 0, 1001, abc, 1.5 with 400 naming limit', async () => {
    for (const limit of ['0', '1001', 'abc', '1.5', '-3']) {
      expectError(await api.get(`/api/tasks/${taskId}/events?limit=${limit}`), 400, 'invalid_argument', /limit/);
    }
  });

  it('answers a negative or non-numeric after_seq with 400 naming after_seq', async () => {
    for (const after of ['-1', 'abc', '2.5']) {
      expectError(await api.get(`/api/tasks/${taskId}/events?after_seq=${after}`), 400, 'invalid_argument', /after_seq/);
    }
  });

  it('accepts limit 1 and 1000', async () => {
    const one = await api.get<EventsPage>(`/api/tasks/${taskId}/events?limit=1`);
    expect(one.status).toBe(200);
    expect(one.body.events.map((e) => e.seq)).toEqual([1]);
    const thousand = await api.get<EventsPage>(`/api/tasks/${taskId}/events?limit=1000`);
    expect(thousand.body.events).toEqual(all);
  });

  it('answers after_seq beyond the last seq with 410 out_of_range', async () => {
    const last = all.at(-1)!.seq;
    const res = await api.get(`/api/tasks/${taskId}/events?after_seq=${last + 1}`);
    expectError(res, 410, 'out_of_range', new RegExp(`after_seq ${last + 1} .*last seq ${last}`));
  });

  it('walks the whole log two events at a time with next_after_seq', async () => {
    expect(all.length).toBeGreaterThan(6);
    const walked: TeamEvent[] = [];
    let after = 0;
    for (let pages = 0; pages < 100; pages++) {
      const page = await api.get<EventsPage>(`/api/tasks/${taskId}/events?after_seq=${after}&limit=2`);
      expect(page.status).toBe(200);
      expect(page.body.task_id).toBe(taskId);
      expect(page.body.events.length).toBeLessThanOrEqual(2);
      if (page.body.events.length === 0) {
        // At the end: no events, and the cursor stays where it was.
        expect(page.body.next_after_seq).toBe(after);
        break;
      }
      expect(page.body.next_after_seq).toBe(page.body.events.at(-1)!.seq);
      walked.push(...page.body.events);
      after = page.body.next_after_seq;
    }
    assertContiguous(walked.map((e) => e.seq));
    expect(walked).toEqual(all);
    expect(walked.at(-1)!.event_type).toBe('task_completed');
    for (const e of walked) expect(Object.keys(e).sort()).toEqual(['attempt', 'event_type', 'payload', 'seq', 'timestamp', 'worker_id']);
  });
});

describe('POST /api/tasks/:task_id/cancel', () => {
  it('answers 409 for a completed task and leaves it completed', async () => {
    const created = await createTask({ workspace_id: newWorkspace(), goal: 'Weigh two options' });
    const events = await pollUntilTerminal(stack.url, created.body.task.task_id);
    expect(events.at(-1)!.event_type).toBe('task_completed');
    const res = await expectNothingWritten(() => api.post(`/api/tasks/${created.body.task.task_id}/cancel`));
    expectError(res, 409, 'conflict', /completed/);
    const after = await api.get<{ task: Task }>(`/api/tasks/${created.body.task.task_id}`);
    expect(after.body.task.status).toBe('completed');
    expect(after.body.task.last_seq).toBe(events.at(-1)!.seq);
  });

  it('cancels a running task; a second cancel is also 200; task_cancelled is the last event', async () => {
    const created = await createTask({ workspace_id: newWorkspace(), goal: 'Take your time [[scripted:delay=3000]]' });
    const taskId = created.body.task.task_id;
    await waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_phase' && e.worker_id === 'lead');

    const first = await api.post<{ task: Task }>(`/api/tasks/${taskId}/cancel`, { reason: 'changed my mind' });
    expect(first.status).toBe(200);
    expect(first.body.task.status).toBe('cancelled');
    const second = await api.post<{ task: Task }>(`/api/tasks/${taskId}/cancel`);
    expect(second.status).toBe(200);
    expect(second.body.task.status).toBe('cancelled');
    expect(second.body.task.workers.find((w) => w.worker_id === 'lead')).toMatchObject({ status: 'failed' });

    // Let the aborted agent loop wind down (no job active), then check nothing was written after the end.
    await waitUntilNoActiveJobs();
    const { body } = await api.get<EventsPage>(`/api/tasks/${taskId}/events?limit=1000`);
    assertContiguous(body.events.map((e) => e.seq));
    expect(body.events.slice(-3).map((e) => [e.event_type, e.worker_id])).toEqual([
      ['worker_failed', 'lead'],
      ['worker_exited', 'lead'],
      ['task_cancelled', null],
    ]);
    expect(body.events.filter((e) => e.event_type === 'task_cancelled')).toHaveLength(1);
    expect(body.events.at(-1)!.payload).toEqual({ reason: 'changed my mind' });
    const task = await api.get<{ task: Task }>(`/api/tasks/${taskId}`);
    expect(task.body.task.status).toBe('cancelled');
    expect(task.body.task.last_seq).toBe(body.events.at(-1)!.seq);
  });

  it('cancels a worker in the middle of a tool call; the lead never starts', async () => {
    const created = await createTask({
      workspace_id: newWorkspace(),
      goal: 'Wait a while',
      team: { workers: [{ role: 'sleeper', instructions: 'Sleep. [[scripted:call=wait({"ms":20000})]]', tools: ['wait'] }] },
    });
    const taskId = created.body.task.task_id;
    await waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_tool_call' && e.worker_id === 'sleeper-1');
    const res = await api.post<{ task: Task }>(`/api/tasks/${taskId}/cancel`);
    expect(res.status).toBe(200);
    expect(res.body.task.workers.map((w) => [w.worker_id, w.status])).toEqual([
      ['lead', 'failed'],
      ['sleeper-1', 'failed'],
    ]);
    await waitUntilNoActiveJobs();
    const { body } = await api.get<EventsPage>(`/api/tasks/${taskId}/events?limit=1000`);
    assertContiguous(body.events.map((e) => e.seq));
    expect(body.events.at(-1)!.event_type).toBe('task_cancelled');
    expect(body.events.filter((e) => e.worker_id === 'lead')).toEqual([]);
    const failed = body.events.find((e) => e.event_type === 'worker_failed');
    expect(failed).toMatchObject({ worker_id: 'sleeper-1', payload: { reason: 'cancelled' } });
  });

  it('rejects an unknown field in the cancel body with 400', async () => {
    const created = await createTask({ workspace_id: newWorkspace(), goal: 'Take your time [[scripted:delay=3000]]' });
    const taskId = created.body.task.task_id;
    const res = await api.post(`/api/tasks/${taskId}/cancel`, { why: 'no reason' });
    expectError(res, 400, 'invalid_argument', /why/);
    expect((await api.get<{ task: Task }>(`/api/tasks/${taskId}`)).body.task.status).not.toBe('cancelled');
    expect((await api.post(`/api/tasks/${taskId}/cancel`)).status).toBe(200);
    await waitUntilNoActiveJobs();
  });
});

/** Polls the gateway's /metrics until BullMQ reports no active agent job. */
async function waitUntilNoActiveJobs(): Promise<void> {
  await waitUntil('no active agent job in /metrics', async () => {
    const text = await (await fetch(`${stack.url}/metrics`)).text();
    return /^cadre_queue_jobs\{[^}]*state="active"[^}]*\} (\d+)/m.exec(text)?.[1] === '0';
  }, { timeoutMs: 10_000 });
}

describe('responses', () => {
  it('show a task as the reference lists it: the team as asked for, the roster without internal fields', async () => {
    const policy = { rules: [{ tool: 'calculate', action: 'deny', reason: 'no maths' }] };
    const created = await api.post<{ task: any }>('/api/tasks', {
      workspace_id: newWorkspace(),
      goal: 'Shape check [[scripted:words=0]]',
      team: { workers: [{ role: 'analyst', tools: ['calculate'], approval_policy: policy }] },
    });
    expect(created.status).toBe(201);
    const { task } = (await api.get<{ task: any }>(`/api/tasks/${created.body.task.task_id}`)).body;
    expect(Object.keys(task).sort()).toEqual(['created_at', 'failure_reason', 'finished_at', 'goal', 'last_seq', 'metadata', 'mode', 'result', 'started_at', 'status', 'task_id', 'team', 'updated_at', 'usage', 'workers', 'workspace_id']);
    // The worker's rules are stored encoded for the Lua side; that encoding is not part of the API.
    expect(Object.keys(task.team.workers[0]).sort()).toEqual(['instructions', 'role', 'tools']);
    expect(Object.keys(task.workers[0]).sort()).toEqual(['attempt', 'failure_reason', 'host_id', 'result', 'role', 'status', 'usage', 'worker_id']);
    // Nulls stay null through the serializer (a string schema would print "").
    expect(created.body.task).toMatchObject({ status: 'queued', started_at: null, finished_at: null, result: null, failure_reason: null, usage: null });
  });
});

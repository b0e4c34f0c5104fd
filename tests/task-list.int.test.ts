import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpClient } from '@cadre/testing';
import { KeyBuilder, TaskStore } from '@cadre/store';
import { TestStack } from './support/stack.ts';

// GET /api/tasks over a real port: newest first, cursor pages that neither repeat nor skip, status filter,
// workspace-bound keys, and clear 400s. No worker runs, so tasks stay queued unless a test cancels them.

interface Summary {
  task_id: string;
  workspace_id: string;
  goal: string;
  status: string;
  mode: string;
  team_size: number;
  created_at: string;
  last_seq: number;
}
interface Page {
  tasks: Summary[];
  next_cursor: string | null;
}

const BOUND_KEY = 'task-list-bound-key';
let stack: TestStack;
let api: ReturnType<typeof httpClient>;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 0, env: { CADRE_API_KEYS: `bound-ws:${BOUND_KEY}` } });
  api = httpClient(stack.url);
});
afterAll(async () => {
  await stack?.stop();
});

const newWorkspace = (): string => `ws-${randomUUID().slice(0, 8)}`;

async function createTask(workspace: string, goal: string, workers: string[] = []): Promise<string> {
  const res = await api.post<{ task: { task_id: string } }>('/api/tasks', {
    workspace_id: workspace,
    goal,
    team: { workers: workers.map((role) => ({ role })) },
  });
  expect(res.status).toBe(201);
  return res.body.task.task_id;
}

async function allPages(query: string, limit: number): Promise<{ pages: Page[]; tasks: Summary[] }> {
  const pages: Page[] = [];
  let cursor: string | null = null;
  do {
    const res: { status: number; body: Page } = await api.get<Page>(`/api/tasks?${query}&limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    expect(res.status).toBe(200);
    pages.push(res.body);
    cursor = res.body.next_cursor;
  } while (cursor && pages.length < 20);
  return { pages, tasks: pages.flatMap((p) => p.tasks) };
}

describe('GET /api/tasks', () => {
  it('lists a workspace newest first in cursor pages that neither repeat nor skip a task', async () => {
    const ws = newWorkspace();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await createTask(ws, `goal ${i}`, i === 0 ? ['a', 'b'] : []));
    await createTask(newWorkspace(), 'another workspace');

    const { pages, tasks } = await allPages(`workspace_id=${ws}`, 2);
    expect(pages.map((p) => p.tasks.length)).toEqual([2, 2, 1]);
    expect(pages.at(-1)!.next_cursor).toBeNull();
    expect(tasks.map((t) => t.task_id).sort()).toEqual([...ids].sort());
    const created = tasks.map((t) => Date.parse(t.created_at));
    expect(created).toEqual([...created].sort((a, b) => b - a));
    expect(tasks.every((t) => t.workspace_id === ws && t.status === 'queued' && t.last_seq === 1)).toBe(true);
    // The named team of the first task: lead + two workers; a planned team starts as the lead alone.
    expect(tasks.find((t) => t.task_id === ids[0])).toMatchObject({ goal: 'goal 0', mode: 'named', team_size: 3 });
    expect(tasks.find((t) => t.task_id === ids[1])).toMatchObject({ mode: 'planned', team_size: 1 });

    // One page holding everything ends the listing.
    const whole = await api.get<Page>(`/api/tasks?workspace_id=${ws}&limit=10`);
    expect(whole.body.tasks.map((t) => t.task_id)).toEqual(tasks.map((t) => t.task_id));
    expect(whole.body.next_cursor).toBeNull();
  });

  it('filters by status', async () => {
    const ws = newWorkspace();
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push(await createTask(ws, `goal ${i}`));
    for (const id of [ids[0], ids[2]]) expect((await api.post(`/api/tasks/${id}/cancel`)).status).toBe(200);

    const cancelled = await allPages(`workspace_id=${ws}&status=cancelled`, 1);
    expect(cancelled.tasks.map((t) => t.task_id).sort()).toEqual([ids[0], ids[2]].sort());
    expect(cancelled.tasks.every((t) => t.status === 'cancelled')).toBe(true);
    const queued = await api.get<Page>(`/api/tasks?workspace_id=${ws}&status=queued`);
    expect(queued.body.tasks.map((t) => t.task_id).sort()).toEqual([ids[1], ids[3]].sort());
    expect((await api.get<Page>(`/api/tasks?workspace_id=${ws}&status=completed`)).body).toEqual({ tasks: [], next_cursor: null });
  });

  it('answers an empty page for a workspace with no tasks', async () => {
    expect((await api.get<Page>(`/api/tasks?workspace_id=${newWorkspace()}`)).body).toEqual({ tasks: [], next_cursor: null });
  });

  it('keeps a workspace-bound key to its workspace', async () => {
    const bound = httpClient(stack.url, BOUND_KEY);
    const id = (await bound.post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: 'bound-ws', goal: 'mine' })).body.task.task_id;
    expect((await bound.get<Page>('/api/tasks?workspace_id=bound-ws')).body.tasks.map((t) => t.task_id)).toContain(id);
    const other = await bound.get<{ error: { code: string } }>(`/api/tasks?workspace_id=${newWorkspace()}`);
    expect(other.status).toBe(403);
    expect(other.body.error.code).toBe('permission_denied');
  });

  it('refuses bad queries with a 400 that names the problem, and a missing key with 401', async () => {
    const cases: [string, RegExp][] = [
      ['/api/tasks', /workspace_id/],
      ['/api/tasks?workspace_id=ws&limit=0', /limit/],
      ['/api/tasks?workspace_id=ws&limit=201', /limit/],
      ['/api/tasks?workspace_id=ws&status=done', /status/],
      ['/api/tasks?workspace_id=ws&cursor=bm90LWEtY3Vyc29y', /cursor/],
      ['/api/tasks?workspace_id=ws&colour=red', /colour/],
      ['/api/tasks?workspace_id=bad%20space', /workspace_id/],
    ];
    for (const [path, message] of cases) {
      const res = await api.get<{ error: { code: string; message: string } }>(path);
      expect(res.status, path).toBe(400);
      expect(res.body.error.code).toBe('invalid_argument');
      expect(res.body.error.message).toMatch(message);
    }
    expect((await httpClient(stack.url, null).get('/api/tasks?workspace_id=ws')).status).toBe(401);
  });
});

describe('the listing index', () => {
  it('is bounded: the oldest entries beyond the cap are dropped, the tasks themselves stay readable', async () => {
    const redis = stack.redis.connect();
    try {
      const keys = new KeyBuilder(`list${randomUUID().slice(0, 6)}`);
      const store = new TaskStore({ redis, keys, taskListMaxEntries: 3 });
      const team = { lead: { instructions: 'lead' }, workers: [], max_workers: 2 };
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) {
        const { task } = await store.createTask({ workspace_id: 'w', goal: `g${i}`, team, metadata: {} });
        await store.listNew(task);
        ids.push(task.task_id);
      }
      expect(await redis.zcard(keys.workspaceTaskList('w'))).toBe(3);
      // Newest first; tasks created in the same millisecond order by id.
      const created = await Promise.all(ids.map(async (id) => ({ id, at: Date.parse((await store.getTask(id))!.created_at) })));
      const newest = created.sort((a, b) => b.at - a.at || a.id.localeCompare(b.id)).map((t) => t.id);
      const page = await store.listTasks('w', { limit: 10 });
      expect(page.tasks.map((t) => t.task_id)).toEqual(newest.slice(0, 3));
      for (const dropped of newest.slice(3)) expect(await store.getTask(dropped)).not.toBeNull();
    } finally {
      await redis.quit();
    }
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_API_KEY, httpClient } from '@cadre/testing';
import { TestStack } from './support/stack.ts';

// bull-board at /admin/queues: behind the API key (bearer, or as the Basic-auth password a browser sends), only
// for a key valid for every workspace; it shows the agents queue's jobs.

const BOUND_KEY = 'queue-admin-bound-key';
let stack: TestStack;

beforeAll(async () => {
  // No worker: a created task's lead job stays waiting, so the queue has something to show.
  stack = await TestStack.start({ workers: 0, env: { CADRE_API_KEYS: `one-ws:${BOUND_KEY}` } });
});
afterAll(async () => {
  await stack?.stop();
});

const basic = (key: string): string => `Basic ${Buffer.from(`operator:${key}`).toString('base64')}`;
const get = (path: string, authorization?: string): Promise<Response> => fetch(`${stack.url}${path}`, { headers: authorization ? { authorization } : {} });

describe('/admin/queues', () => {
  it('asks a browser for the key, and refuses wrong keys and keys bound to one workspace', async () => {
    const anonymous = await get('/admin/queues');
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toMatch(/^Basic realm="Cadre queues"/);
    expect((await get('/admin/queues', basic('wrong'))).status).toBe(401);
    expect((await get('/admin/queues', 'Bearer wrong')).status).toBe(401);
    const bound = await get('/admin/queues', `Bearer ${BOUND_KEY}`);
    expect(bound.status).toBe(403);
    expect(((await bound.json()) as { error: { code: string } }).error.code).toBe('permission_denied');
    // The API behind the page is guarded the same way.
    expect((await get('/admin/queues/api/queues')).status).toBe(401);
  });

  it('serves the dashboard and its API to the API key, as bearer or Basic password', async () => {
    const page = await get('/admin/queues', basic(TEST_API_KEY));
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('Cadre queues');
    expect((await get('/admin/queues', `Bearer ${TEST_API_KEY}`)).status).toBe(200);

    const created = await httpClient(stack.url).post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: 'one-ws', goal: 'queued for the admin' });
    const res = await get('/admin/queues/api/queues?activeQueue=agents&status=waiting', basic(TEST_API_KEY));
    expect(res.status).toBe(200);
    const body = (await res.json()) as { queues: { name: string; counts: Record<string, number>; jobs: { id: string }[] }[] };
    const agents = body.queues.find((q) => q.name === 'agents');
    expect(agents?.counts.waiting).toBe(1);
    expect(agents?.jobs.map((j) => j.id)).toEqual([`${created.body.task.task_id}_lead`]);
  });
});

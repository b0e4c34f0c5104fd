import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_API_KEY, grpcClient, httpClient, watchTeam, type ApiResponse } from '@cadre/testing';
import { gatewayConfig } from '../apps/gateway/src/config.ts';
import { startGateway, type Gateway } from '../apps/gateway/src/gateway.ts';
import { TestStack } from './support/stack.ts';

// Who may do what over HTTP (and the same answers over gRPC): keys bound to workspaces, a key for all of them,
// no key at all, dev mode. No worker pool runs: tasks stay queued, which is all these checks need.

const KEY1 = `key1-${randomUUID()}`;
const KEY2 = `key2-${randomUUID()}`;
const ALL_KEYS = [KEY1, KEY2, TEST_API_KEY];

interface Task {
  task_id: string;
  workspace_id: string;
  status: string;
}

let stack: TestStack;
let redis: Redis;
/** Gateways on the same Redis and prefix, configured differently. */
let urls: { bound: string; allAndBound: string; noKeys: string; devMode: string; logged: string };
let loggedGateway: Gateway;
const logLines: string[] = [];
const grpcClients: ReturnType<typeof grpcClient>[] = [];

beforeAll(async () => {
  stack = await TestStack.start({ workers: 0, env: { CADRE_API_KEYS: `ws1:${KEY1},ws2:${KEY2}`, CADRE_API_KEY: '' } });
  redis = new Redis(stack.redis.url);
  const urlOf = (g: Gateway): string => `http://127.0.0.1:${g.port}`;
  const allAndBound = await stack.addGateway({ CADRE_API_KEY: TEST_API_KEY });
  const noKeys = await stack.addGateway({ CADRE_API_KEY: '', CADRE_API_KEYS: '' });
  const devMode = await stack.addGateway({ CADRE_API_KEY: '', CADRE_API_KEYS: '', CADRE_DEV_MODE: 'true' });
  // One gateway logs everything (trace, no redaction) into memory, to show keys never reach the logger at all.
  const config = gatewayConfig({
    REDIS_URL: stack.redis.url,
    CADRE_API_KEYS: `ws1:${KEY1},ws2:${KEY2}`,
    CADRE_API_KEY: TEST_API_KEY,
    CADRE_KEY_PREFIX: stack.prefix,
    PORT: '0',
    HOST: '127.0.0.1',
  });
  const logger = pino({ level: 'trace' }, { write: (line: string) => void logLines.push(line) });
  loggedGateway = await startGateway({ ...config, redis: stack.redis.target }, logger);
  urls = { bound: stack.url, allAndBound: urlOf(allAndBound), noKeys: urlOf(noKeys), devMode: urlOf(devMode), logged: urlOf(loggedGateway) };
});
afterAll(async () => {
  for (const client of grpcClients) client.close();
  await loggedGateway?.close();
  await redis?.quit();
  await stack?.stop();
});

function expectError(res: ApiResponse<unknown>, status: number, code: string, message: RegExp | string): void {
  expect({ status: res.status, body: res.body }).toEqual({
    status,
    body: { error: { code, message: typeof message === 'string' ? message : expect.stringMatching(message) } },
  });
  expectNoKeyIn(res);
}

function expectNoKeyIn(res: ApiResponse<unknown>): void {
  const text = JSON.stringify(res.body);
  for (const key of ALL_KEYS) expect(text).not.toContain(key);
}

async function taskKeys(): Promise<string[]> {
  return (await redis.keys(`${stack.prefix}:*`)).sort();
}

async function createIn(url: string, key: string | null, workspaceId: string): Promise<ApiResponse<{ task: Task }>> {
  return httpClient(url, key).post<{ task: Task }>('/api/tasks', { workspace_id: workspaceId, goal: 'Weigh two options' });
}

function grpcTo(url: string): ReturnType<typeof grpcClient> {
  const client = grpcClient(url.replace('http://', ''));
  grpcClients.push(client);
  return client;
}

describe('missing or wrong keys', () => {
  it('answers 401 for a missing, malformed or wrong key, and writes nothing', async () => {
    const before = await taskKeys();
    const body = { workspace_id: 'ws1', goal: 'Weigh two options' };
    const missing = await httpClient(urls.bound, null).post('/api/tasks', body);
    expectError(missing, 401, 'unauthenticated', /Authorization: Bearer/);
    for (const header of ['Basic a2V5MTprZXky', 'Bearer', `Token ${KEY1}`, `Bearer ${KEY1.slice(0, -1)}`, `Bearer ${KEY1}x`, 'Bearer wrong-key']) {
      const res = await httpClient(urls.bound, null).post('/api/tasks', body, { authorization: header });
      expect(res.status, header).toBe(401);
      expectError(res, 401, 'unauthenticated', /bearer key|invalid API key/);
    }
    expect(await taskKeys()).toEqual(before);
  });

  it('checks the key before the body: no key and a bad body is 401, not 400', async () => {
    const res = await httpClient(urls.bound, null).post('/api/tasks', { goal: 123 });
    expectError(res, 401, 'unauthenticated', /bearer key/);
  });

  it('guards every task route', async () => {
    const id = randomUUID();
    const api = httpClient(urls.bound, 'wrong-key');
    for (const res of [await api.get(`/api/tasks/${id}`), await api.get(`/api/tasks/${id}/events`), await api.get(`/api/tasks/${id}/stream`), await api.post(`/api/tasks/${id}/cancel`)]) {
      expectError(res, 401, 'unauthenticated', 'invalid API key');
    }
  });

  it('answers UNAUTHENTICATED over gRPC for a missing or wrong key', async () => {
    const client = grpcTo(urls.bound);
    for (const key of [null, 'wrong-key']) {
      const { status, events } = await watchTeam(client, { taskId: randomUUID() }, key);
      expect(events).toEqual([]);
      expect(status.code).toBe(grpc.status.UNAUTHENTICATED);
    }
  });
});

describe('keys bound to workspaces (CADRE_API_KEYS)', () => {
  it('lets key1 create and read in ws1', async () => {
    const created = await createIn(urls.bound, KEY1, 'ws1');
    expect(created.status).toBe(201);
    expect(created.body.task).toMatchObject({ workspace_id: 'ws1', status: 'queued' });
    expectNoKeyIn(created);
    const got = await httpClient(urls.bound, KEY1).get<{ task: Task }>(`/api/tasks/${created.body.task.task_id}`);
    expect(got.status).toBe(200);
    const events = await httpClient(urls.bound, KEY1).get<{ events: { event_type: string }[] }>(`/api/tasks/${created.body.task.task_id}/events`);
    expect(events.body.events.map((e) => e.event_type)).toEqual(['task_queued']);
  });

  it('answers 403 when key1 creates in ws2, and writes nothing', async () => {
    const before = await taskKeys();
    const res = await createIn(urls.bound, KEY1, 'ws2');
    expectError(res, 403, 'permission_denied', /workspace "ws2"/);
    // The same holds with an Idempotency-Key: the key is not claimed either.
    const withKey = await httpClient(urls.bound, KEY1).post('/api/tasks', { workspace_id: 'ws2', goal: 'g' }, { 'idempotency-key': 'k-403' });
    expect(withKey.status).toBe(403);
    expect(await taskKeys()).toEqual(before);
  });

  it("answers key2's reads of a ws1 task with 404, exactly like a missing task", async () => {
    const created = await createIn(urls.bound, KEY1, 'ws1');
    const theirs = created.body.task.task_id;
    const missing = randomUUID();
    const key2 = httpClient(urls.bound, KEY2);
    // A cursor past the log (410 for the owner) must not reveal the task either.
    for (const suffix of ['', '/events', '/events?after_seq=0&limit=5', '/events?after_seq=999', '/stream']) {
      const other = await key2.get(`/api/tasks/${theirs}${suffix}`);
      const none = await key2.get(`/api/tasks/${missing}${suffix}`);
      expectError(other, 404, 'not_found', `task ${theirs} not found`);
      expectError(none, 404, 'not_found', `task ${missing} not found`);
      expect(JSON.stringify(other.body).replace(theirs, 'ID')).toBe(JSON.stringify(none.body).replace(missing, 'ID'));
    }
    // Cancel too: 404, and the task is untouched.
    expectError(await key2.post(`/api/tasks/${theirs}/cancel`), 404, 'not_found', `task ${theirs} not found`);
    const still = await httpClient(urls.bound, KEY1).get<{ task: Task }>(`/api/tasks/${theirs}`);
    expect(still.body.task.status).toBe('queued');
  });

  it('answers NOT_FOUND over gRPC for a task of another workspace, as for a missing one', async () => {
    const created = await createIn(urls.bound, KEY1, 'ws1');
    const client = grpcTo(urls.bound);
    const other = await watchTeam(client, { taskId: created.body.task.task_id }, KEY2);
    const none = await watchTeam(client, { taskId: randomUUID() }, KEY2);
    expect([other.status.code, none.status.code]).toEqual([grpc.status.NOT_FOUND, grpc.status.NOT_FOUND]);
    expect(other.events).toEqual([]);
  });

  it('lets CADRE_API_KEY read every workspace next to bound keys', async () => {
    const created = await createIn(urls.allAndBound, KEY2, 'ws2');
    expect(created.status).toBe(201);
    const got = await httpClient(urls.allAndBound, TEST_API_KEY).get<{ task: Task }>(`/api/tasks/${created.body.task.task_id}`);
    expect(got.status).toBe(200);
    expect((await createIn(urls.allAndBound, TEST_API_KEY, `any-${randomUUID().slice(0, 8)}`)).status).toBe(201);
    // That key is not valid on the gateway that does not configure it.
    expect((await createIn(urls.bound, TEST_API_KEY, 'ws1')).status).toBe(401);
  });

  it('lists the workspaces (GET /api/workspaces) only to a key valid for every workspace: a bound key may not learn the others', async () => {
    expect((await createIn(urls.allAndBound, KEY1, 'ws1')).status).toBe(201);
    const all = await httpClient(urls.allAndBound, TEST_API_KEY).get<{ workspaces: string[] }>('/api/workspaces');
    expect(all.status).toBe(200);
    expect(all.body.workspaces).toContain('ws1');
    expect(all.body.workspaces).toEqual([...all.body.workspaces].sort());
    expectError(await httpClient(urls.allAndBound, KEY1).get('/api/workspaces'), 403, 'permission_denied', 'listing workspaces needs a key valid for every workspace');
    expectError(await httpClient(urls.bound, 'wrong-key').get('/api/workspaces'), 401, 'unauthenticated', 'invalid API key');
  });
});

describe('no key configured', () => {
  it('answers 503 on the tasks API outside dev mode, with or without a key, and writes nothing', async () => {
    const before = await taskKeys();
    for (const key of [null, KEY1, 'anything']) {
      const res = await createIn(urls.noKeys, key, 'ws1');
      expectError(res, 503, 'unavailable', /no API key is configured/);
      expectError(await httpClient(urls.noKeys, key).get(`/api/tasks/${randomUUID()}`), 503, 'unavailable', /CADRE_API_KEY/);
    }
    expect(await taskKeys()).toEqual(before);
    const { status } = await watchTeam(grpcTo(urls.noKeys), { taskId: randomUUID() }, null);
    expect(status.code).toBe(grpc.status.UNAVAILABLE);
  });

  it('serves everyone in dev mode', async () => {
    const created = await createIn(urls.devMode, null, `dev-${randomUUID().slice(0, 8)}`);
    expect(created.status).toBe(201);
    expect((await httpClient(urls.devMode, null).get(`/api/tasks/${created.body.task.task_id}`)).status).toBe(200);
  });

  it('does not let dev mode bypass configured keys', async () => {
    const gateway = await stack.addGateway({ CADRE_DEV_MODE: 'true' });
    const res = await createIn(`http://127.0.0.1:${gateway.port}`, null, 'ws1');
    expectError(res, 401, 'unauthenticated', /bearer key/);
  });
});

describe('health endpoints', () => {
  it('answers /healthz, /readyz and /metrics without a key on every gateway', async () => {
    for (const url of Object.values(urls)) {
      const health = await httpClient(url, null).get('/healthz');
      expect({ url, status: health.status, body: health.body }).toEqual({ url, status: 200, body: { status: 'ok' } });
      expect((await httpClient(url, null).get('/readyz')).status).toBe(200);
      expect((await fetch(`${url}/metrics`)).status).toBe(200);
    }
  });
});

describe('keys in logs', () => {
  it('never logs a key, whatever the request', async () => {
    const api = (key: string | null) => httpClient(urls.logged, key);
    const created = await createIn(urls.logged, KEY1, 'ws1');
    expect(created.status).toBe(201);
    await api(KEY1).get(`/api/tasks/${created.body.task.task_id}`);
    await api(KEY2).get(`/api/tasks/${created.body.task.task_id}`);
    await createIn(urls.logged, KEY1, 'ws2');
    await api(KEY1).post('/api/tasks', '{"broken": ');
    await api(TEST_API_KEY).post(`/api/tasks/${created.body.task.task_id}/cancel`);
    await api(`${KEY1}-wrong`).get(`/api/tasks/${created.body.task.task_id}`);
    await watchTeam(grpcTo(urls.logged), { taskId: created.body.task.task_id }, KEY2);
    const logs = logLines.join('');
    expect(logs).toContain(created.body.task.task_id); // the capture works: 'task created' was logged
    for (const key of ALL_KEYS) expect(logs).not.toContain(key);
  });
});

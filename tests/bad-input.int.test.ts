import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_QUEUE, KeyBuilder, agentJobId } from '@cadre/store';
import { Queue } from 'bullmq';
import { dumpDiff, dumpRedis, encodeWatchTeamRequest, grpcClient, httpClient, rawWatchTeam, runsCall, watchTeam } from '@cadre/testing';
import { MAX_JSON_DEPTH } from '../apps/gateway/src/http/request-bounds.ts';
import { TestStack } from './support/stack.ts';

// Each class of bad input from issue 8, on every route it reached: a clear 4xx (or INVALID_ARGUMENT) that names
// the field, and Redis exactly as it was (keys, values and TTLs).

const RUNS_KEY = 'bad-input-runs-key';
const CONTROL_KEY = 'bad-input-control-key';
let stack: TestStack;
let redis: Redis;
let queue: Queue;
let api: ReturnType<typeof httpClient>;
let taskId: string;
let runId: string;

const LONE = 'r\ud83d'; // a string cut inside an emoji
/** JSON text nested `depth` levels deep (arrays and objects in turn), written by hand: JSON.stringify would recurse. */
const nested = (depth: number): string => {
  let open = '';
  let close = '';
  for (let i = 0; i < depth; i++) {
    open += i % 2 ? '{"k":' : '[';
    close = (i % 2 ? '}' : ']') + close;
  }
  return `${open}"leaf"${close}`;
};
const runs = (method: string, path: string, body?: unknown) => runsCall(stack.url, RUNS_KEY, method, path, body);
/** A runs call with a body sent as written. */
async function runsRaw(method: string, path: string, raw: string): Promise<{ status: number; body: Record<string, any> }> {
  const res = await fetch(`${stack.url}${path}`, { method, headers: { 'x-windie-runs-key': RUNS_KEY, 'content-type': 'application/json' }, body: raw });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

async function unchanged<T>(request: () => Promise<T>): Promise<T> {
  const patterns = [`${stack.prefix}:*`, `{${stack.prefix}:bull}:*`];
  const before = await dumpRedis(redis, patterns);
  const result = await request();
  expect(dumpDiff(before, await dumpRedis(redis, patterns))).toEqual([]);
  return result;
}

beforeAll(async () => {
  stack = await TestStack.start({ workers: 0, env: { RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: CONTROL_KEY, RUNS_WORKER_TTL_MS: '600000' } });
  redis = new Redis(stack.redis.url);
  queue = new Queue(AGENT_QUEUE, { connection: redis, prefix: new KeyBuilder(stack.prefix).bullPrefix() });
  api = httpClient(stack.url);
  const task = await api.post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: 'bad-input', goal: 'fixture' });
  taskId = task.body.task.task_id;
  const run = await runs('POST', '/api/runs/', { workspace_id: 'bad-input', query: 'fixture' });
  runId = run.body.run.run_id;
});
afterAll(async () => {
  await queue?.close();
  await redis?.quit();
  await stack?.stop();
});

describe('strings that are not well-formed Unicode', () => {
  it('tasks: 400 naming the field, in goal, team, metadata values and field names', async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ workspace_id: 'w', goal: LONE }, /^body\/goal is not well-formed Unicode/],
      [{ workspace_id: 'w', goal: 'g', team: { workers: [{ role: LONE }] } }, /^body\/team\/workers\/0\/role /],
      [{ workspace_id: 'w', goal: 'g', team: { lead: { instructions: 'ok', model: `m${LONE}` } } }, /^body\/team\/lead\/model /],
      [{ workspace_id: 'w', goal: 'g', metadata: { a: { b: [LONE] } } }, /^body\/metadata\/a\/b\/0 /],
      [{ workspace_id: 'w', goal: 'g', metadata: { [LONE]: 1 } }, /^body\/metadata has a field name that is not well-formed/],
    ];
    for (const [body, message] of cases) {
      const res = await unchanged(() => api.post('/api/tasks', body));
      expect(res, JSON.stringify(body)).toMatchObject({ status: 400, body: { error: { code: 'invalid_argument', message: expect.stringMatching(message) } } });
    }
    const cancel = await unchanged(() => api.post(`/api/tasks/${taskId}/cancel`, { reason: LONE }));
    expect(cancel).toMatchObject({ status: 400, body: { error: { message: expect.stringMatching(/^body\/reason /) } } });
  });

  it('runs: 422 with FastAPI detail locating the field, on create, heartbeat, dispatch, relay and control', async () => {
    const cases: [string, string, Record<string, unknown>, (string | number)[]][] = [
      ['POST', '/api/runs/', { workspace_id: 'bad-input', query: LONE }, ['body', 'query']],
      ['POST', '/api/runs/workers/heartbeat', { workspace_id: 'bad-input', worker_id: 'w1', metadata: { note: LONE } }, ['body', 'metadata', 'note']],
      ['POST', '/api/runs/workers/heartbeat', { workspace_id: 'bad-input', worker_id: `w${LONE}` }, ['body', 'worker_id']],
      ['POST', `/api/runs/${runId}/worker-dispatched`, { worker_id: 'w1', turn_ref: LONE }, ['body', 'turn_ref']],
      ['POST', `/api/runs/${runId}/events`, { event_type: 'tool-result', payload: { output: LONE } }, ['body', 'payload', 'output']],
      ['POST', `/api/runs/${runId}/control`, { action: 'pause', requested_by: LONE }, ['body', 'requested_by']],
    ];
    for (const [method, path, body, loc] of cases) {
      const res = await unchanged(() => runs(method, path, body));
      expect(res, `${path} ${JSON.stringify(body)}`).toMatchObject({ status: 422, body: { detail: [{ loc, msg: 'is not well-formed Unicode (it contains a lone surrogate)' }] } });
    }
  });

  it('an Idempotency-Key whose first request was refused still creates the task (with its roster and job) on retry', async () => {
    const key = `idem-${randomUUID()}`;
    const body = { workspace_id: 'idem-ws', goal: 'Weigh two options', team: { workers: [{ role: 'pro' }] } };
    const refused = await unchanged(() => api.post('/api/tasks', { ...body, goal: LONE }, { 'idempotency-key': key }));
    expect(refused.status).toBe(400);
    const created = await api.post<{ task: { task_id: string; status: string; workers: { worker_id: string }[] } }>('/api/tasks', body, { 'idempotency-key': key });
    expect(created.status).toBe(201);
    expect(created.body.task.workers.map((w) => w.worker_id)).toEqual(['lead', 'pro-1']);
    expect(await queue.getJob(agentJobId(created.body.task.task_id, 'lead'))).toBeDefined();
    const again = await api.post<{ task: { task_id: string } }>('/api/tasks', body, { 'idempotency-key': key });
    expect(again).toMatchObject({ status: 200, body: { task: { task_id: created.body.task.task_id } } });
  });
});

describe('nesting and size', () => {
  it(`refuses nesting deeper than ${MAX_JSON_DEPTH} levels anywhere, before the schema or Lua sees it`, async () => {
    for (const depth of [MAX_JSON_DEPTH, 1_001, 5_000]) {
      const task = await unchanged(() => api.request('POST', '/api/tasks', `{"workspace_id":"w","goal":"g","metadata":{"deep":${nested(depth)}}}`));
      expect(task).toMatchObject({ status: 400, body: { error: { message: expect.stringMatching(new RegExp(`^body/metadata/deep(/\\w+)* is nested deeper than ${MAX_JSON_DEPTH} levels`)) } } });
      const heartbeat = await unchanged(() => runsRaw('POST', '/api/runs/workers/heartbeat', `{"workspace_id":"bad-input","worker_id":"w1","metadata":{"deep":${nested(depth)}}}`));
      expect(heartbeat).toMatchObject({ status: 422, body: { detail: [{ loc: expect.arrayContaining(['body', 'metadata', 'deep']), msg: `is nested deeper than ${MAX_JSON_DEPTH} levels` }] } });
      const relay = await unchanged(() => runsRaw('POST', `/api/runs/${runId}/events`, `{"event_type":"x","payload":${nested(depth)}}`));
      expect(relay.status).toBe(422);
      const create = await unchanged(() => runsRaw('POST', '/api/runs/', `{"workspace_id":"bad-input","query":"q","metadata":{"deep":${nested(depth)}}}`));
      expect(create.status).toBe(422);
    }
    // Just within the bound is accepted (the body is level 1, metadata 2, deep 3).
    const ok = await api.request('POST', '/api/tasks', `{"workspace_id":"w","goal":"g","metadata":{"deep":${nested(MAX_JSON_DEPTH - 2)}}}`);
    expect(ok.status).toBe(201);
  });

  it('refuses strings and field names over their caps inside free-form metadata', async () => {
    // Within the body limit (1 MiB), one character too many.
    const long = await unchanged(() => api.post('/api/tasks', { workspace_id: 'w', goal: 'g', metadata: { blob: 'x'.repeat(1_000_001) } }));
    expect(long).toMatchObject({ status: 400, body: { error: { message: 'body/metadata/blob is longer than 1000000 characters' } } });
    const key = await unchanged(() => runs('POST', '/api/runs/workers/heartbeat', { workspace_id: 'bad-input', worker_id: 'w1', metadata: { ['k'.repeat(257)]: 1 } }));
    expect(key).toMatchObject({ status: 422, body: { detail: [{ loc: ['body', 'metadata'], msg: 'has a field name that is longer than 256 characters' }] } });
  });
});

describe('numbers Redis cannot take', () => {
  const hostile = ['1e21', '18446744073709551615', '18446744073709551616', '9007199254740992', 'Infinity', '-Infinity', '1e308'];

  it('refused for after_seq and limit on task and run event and stream routes (400; the runs API: 422, as FastAPI)', async () => {
    for (const value of hostile) {
      for (const path of [`/api/tasks/${taskId}/events?after_seq=${value}`, `/api/tasks/${taskId}/events?limit=${value}`, `/api/tasks/${taskId}/stream?after_seq=${value}`]) {
        const res = await unchanged(() => api.get(path));
        expect(res, path).toMatchObject({ status: 400, body: { error: { code: 'invalid_argument', message: expect.stringMatching(/^querystring\/(after_seq|limit) must be/) } } });
      }
      for (const path of [`/api/runs/${runId}/events?after_seq=${value}`, `/api/runs/${runId}/events?limit=${value}`, `/api/runs/${runId}/stream?after_seq=${value}`]) {
        const res = await unchanged(() => runs('GET', path));
        expect(res, path).toMatchObject({ status: 422, body: { detail: [{ loc: ['query', expect.stringMatching(/^(after_seq|limit)$/)], msg: expect.stringMatching(/^must be/) }] } });
      }
    }
    // The largest exact integer is a cursor ahead of the log, as any other: 410.
    expect((await api.get(`/api/tasks/${taskId}/events?after_seq=9007199254740991`)).status).toBe(410);
  });

  it('WatchTeam: after_seq above 2^53 − 1, undecodable and empty requests are INVALID_ARGUMENT, not INTERNAL', async () => {
    const client = grpcClient(stack.grpcTarget);
    try {
      for (const afterSeq of [2n ** 53n, 2n ** 64n - 1n]) {
        const { status } = await unchanged(() => rawWatchTeam(client, encodeWatchTeamRequest(taskId, afterSeq)));
        expect(status).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: 'after_seq must be at most 9007199254740991' });
      }
      const garbage = await rawWatchTeam(client, Buffer.from([0x0a, 0xff, 0xff]));
      expect(garbage.status).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: expect.stringMatching(/not a roz.v1.WatchTeamRequest/) });
      // An empty request (no task_id) says what is missing, not that "" is no UUID.
      for (const empty of [encodeWatchTeamRequest('', 0n), Buffer.alloc(0)]) {
        const { status } = await unchanged(() => rawWatchTeam(client, empty));
        expect(status).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: 'task_id is required' });
      }
      // Still authentication first: no key is UNAUTHENTICATED whatever the bytes.
      expect((await rawWatchTeam(client, encodeWatchTeamRequest(taskId, 2n ** 60n), null)).status.code).toBe(grpc.status.UNAUTHENTICATED);
      // A well-formed request still works.
      await api.post(`/api/tasks/${taskId}/cancel`);
      const ok = await watchTeam(client, { taskId });
      expect(ok.status.code).toBe(grpc.status.OK);
    } finally {
      client.close();
    }
  });
});

describe('bodies that are not JSON', () => {
  // text/plain is what Fastify would parse as a string (then "body must be object"); the rest it has no parser for.
  const TYPES = ['text/plain', 'text/plain; charset=utf-8', 'application/x-www-form-urlencoded', 'application/xml'];
  const BODY = '{"workspace_id":"bad-input","goal":"g","query":"q"}';
  const message = (type: string): string => `unsupported content-type "${type}"; send application/json`;

  it('tasks, sessions and approvals: every JSON route answers 415 naming the type and asking for JSON; nothing written', async () => {
    const session = randomUUID(); // the content type is refused before any route looks its ids up
    const routes: [string, string][] = [
      ['POST', '/api/tasks'], ['POST', `/api/tasks/${taskId}/cancel`],
      ['POST', '/api/sessions'], ['POST', `/api/sessions/${session}/messages`], ['PUT', `/api/sessions/${session}/model`],
      ['POST', `/api/sessions/${session}/steer`], ['POST', `/api/sessions/${session}/follow-ups`], ['POST', `/api/sessions/${session}/abort`],
      ['PATCH', `/api/sessions/${session}/modes`], ['POST', `/api/sessions/${session}/tool-results`], ['POST', `/api/sessions/${session}/tools`],
      ['POST', `/api/sessions/${session}/cancel`],
      ['PUT', '/api/workspaces/bad-input/approval-policy'], ['POST', '/api/approvals/decisions'], ['POST', '/api/approvals/some-approval/decision'],
    ];
    await unchanged(async () => {
      for (const [method, path] of routes) {
        for (const type of TYPES) {
          const res = await api.request(method, path, BODY, { 'content-type': type });
          expect(res, `${method} ${path} as ${type}`).toEqual({ status: 415, body: { error: { code: 'unsupported_media_type', message: message(type) } } });
        }
      }
    });
  });

  it('runs: every JSON route answers 415 in the runs API\'s shape (detail, with the same text in error); nothing written', async () => {
    const routes = ['/api/runs/', '/api/runs', '/api/runs/workers/heartbeat', '/api/runs/stop-all', `/api/runs/${runId}/control`,
      `/api/runs/${runId}/worker-dispatched`, `/api/runs/${runId}/approvals`, `/api/runs/${runId}/events`];
    await unchanged(async () => {
      for (const path of routes) {
        for (const type of TYPES) {
          const res = await fetch(`${stack.url}${path}`, {
            method: 'POST', headers: { 'x-windie-runs-key': RUNS_KEY, 'x-windie-runs-control-key': CONTROL_KEY, 'content-type': type }, body: BODY,
          });
          const answer = { status: res.status, body: await res.json() };
          expect(answer, `POST ${path} as ${type}`).toEqual({ status: 415, body: { detail: message(type), error: { code: 'unsupported_media_type', message: message(type) } } });
        }
      }
    });
  });
});

describe('readiness', () => {
  it('/readyz answers 503 at once while Redis is down, and 200 again once it is back', async () => {
    const local = await TestStack.start({ workers: 0 });
    try {
      expect((await fetch(`${local.url}/readyz`)).status).toBe(200);
      await local.redis.stop();
      // Down: answered (not left hanging) with 503.
      const down = await fetch(`${local.url}/readyz`, { signal: AbortSignal.timeout(5_000) });
      expect(down.status).toBe(503);
      expect(await down.json()).toEqual({ status: 'not_ready' });
    } finally {
      await local.stop().catch(() => undefined);
    }
  });

  it('/readyz answers 503 while the heartbeat connection cannot reconnect, the main one being up', async () => {
    const local = await TestStack.start({ workers: 0 });
    const admin = new Redis(local.redis.url);
    const readyz = async () => (await fetch(`${local.url}/readyz`, { signal: AbortSignal.timeout(5_000) })).status;
    try {
      expect(await readyz()).toBe(200);
      const clients = ((await admin.client('LIST')) as string).trim().split('\n');
      const heartbeats = clients.find((line) => line.includes(' name=cadre-gateway-heartbeats '));
      expect(heartbeats).toBeDefined();
      const id = /^id=(\d+) /.exec(heartbeats!)![1]!;
      const maxclients = (await admin.config('GET', 'maxclients'))[1]!;
      // One transaction: drop the heartbeat connection and leave no room for its reconnect (a server at maxclients).
      await admin.multi().call('CLIENT', 'KILL', 'ID', id).config('SET', 'maxclients', String(clients.length - 1)).exec();
      await expect.poll(readyz, { timeout: 5_000 }).toBe(503);
      await admin.config('SET', 'maxclients', maxclients);
      await expect.poll(readyz, { timeout: 10_000 }).toBe(200);
    } finally {
      await admin.quit();
      await local.stop().catch(() => undefined);
    }
  });
});

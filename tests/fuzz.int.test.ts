import * as grpc from '@grpc/grpc-js';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_API_KEY, dumpDiff, dumpRedis, encodeWatchTeamRequest, grpcClient, rawWatchTeam, runsCall } from '@cadre/testing';
import { TestStack } from './support/stack.ts';

// Property-based fuzzing of every REST route and WatchTeam against a real gateway and Redis. For every generated
// request: never a 5xx (or gRPC INTERNAL/UNKNOWN); a refusal carries a message; and a refused request leaves Redis
// exactly as it was (every key's DUMP and whether it expires). Requests are mostly valid bodies with one field made
// hostile (lone surrogates, deep nesting, huge strings, numbers Redis cannot take, wrong types), so they get past
// the first check. Fixed seed, bounded cases: the same requests on every run.
//
// Nothing moves in the background here (no workers, leases and enqueue grace far beyond the test), so the only keys
// left out of the comparison are BullMQ's stall-check marker (BACKGROUND_KEYS), which a worker would refresh.

const SEED = 0x8c4d3e;
const RUNS = 75;
const RUNS_KEY = 'fuzz-runs-key';
const CONTROL_KEY = 'fuzz-control-key';
const WS = 'fuzz';

let stack: TestStack;
let redis: Redis;
let queuedTask: string;
let cancelledTask: string;
let runningRun: string;
let session: string;
let baseline: Map<string, string>;
const stats = { requests: 0, refused: 0, accepted: 0 };

const dump = () => dumpRedis(redis, [`${stack.prefix}:*`, `{${stack.prefix}:bull}:*`]);

beforeAll(async () => {
  stack = await TestStack.start({
    workers: 0,
    env: { RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: CONTROL_KEY, RUNS_WORKER_TTL_MS: '600000', CADRE_ENQUEUE_GRACE_MS: '600000' },
  });
  redis = new Redis(stack.redis.url);
  const tasks = async (path: string, body?: unknown) =>
    (await fetch(`${stack.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${TEST_API_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(body ?? {}) })).json() as Promise<{ task: { task_id: string } }>;
  queuedTask = (await tasks('/api/tasks', { workspace_id: WS, goal: 'stays queued', team: { workers: [{ role: 'pro' }] } })).task.task_id;
  cancelledTask = (await tasks('/api/tasks', { workspace_id: WS, goal: 'ends at once' })).task.task_id;
  await tasks(`/api/tasks/${cancelledTask}/cancel`);
  runningRun = (await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: WS, query: 'fixture' })).body.run.run_id;
  const beat = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/workers/heartbeat', { workspace_id: WS, worker_id: 'vm-1', status: 'ready' });
  await runsCall(stack.url, RUNS_KEY, 'POST', `/api/runs/${runningRun}/worker-dispatched`, { worker_id: 'vm-1', lease_id: beat.body.assigned_run.lease_id });
  const created = await fetch(`${stack.url}/api/sessions`, { method: 'POST', headers: { authorization: `Bearer ${TEST_API_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify({ workspace_id: WS }) });
  session = ((await created.json()) as { session: { session_id: string } }).session.session_id;
  baseline = await dump();
});
afterAll(async () => {
  await redis?.quit();
  await stack?.stop();
});

// ---- values -------------------------------------------------------------------------------------------------

/** A value nested `depth` levels deep, serialized by hand (JSON.stringify would recurse that deep). */
class Deep {
  readonly depth: number;
  constructor(depth: number) {
    this.depth = depth;
  }
}
const lone = fc.constantFrom('\ud83d', 'r\ud83d', '\udc00tail', 'a\ud800b\udbff', '😀\ud83d');
const hostileString = fc.oneof(
  lone,
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom('', ' ', '\u0000', '../../etc', '{t:x}', '%00', 'x'.repeat(100_001), 'y'.repeat(1_000_001), 'k'.repeat(20_001), '😀'.repeat(300)),
);
const hostileNumber = fc.oneof(fc.integer(), fc.double(), fc.constantFrom(-1, 0, 1e21, 2 ** 53, 2 ** 64, Number.MAX_VALUE, -0, 0.5));
const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: hostileString },
  { weight: 2, arbitrary: hostileNumber },
  { weight: 2, arbitrary: fc.constantFrom(31, 33, 1_001, 5_000).map((d) => new Deep(d)) },
  { weight: 1, arbitrary: fc.constantFrom(null, true, false, [], {}) },
  { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 1, arbitrary: fc.dictionary(hostileString, fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }) },
);
const queryNumber = fc.oneof(
  fc.constantFrom('1e21', '18446744073709551615', '18446744073709551616', '9007199254740992', 'Infinity', '-Infinity', 'NaN', '-1', '1.5', '0x10', '', ' 1', '1e308', '-0', '+1', '0', '5', '1000', '1001'),
  fc.bigInt({ min: 0n, max: 2n ** 70n }).map(String),
);
/** Arbitrary bytes, percent-encoded: what a path or query may carry (invalid UTF-8 included). */
const encodedBytes = fc.uint8Array({ maxLength: 24 }).map((bytes) => [...bytes].map((b) => `%${b.toString(16).padStart(2, '0')}`).join(''));
const id = (known: () => string[]) =>
  fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom(0, 1, 2).map((i) => known()[i % known().length]!) },
    { weight: 1, arbitrary: fc.uuid() },
    { weight: 2, arbitrary: encodedBytes },
    { weight: 1, arbitrary: fc.constantFrom('not-a-uuid', '00000000-0000-0000-0000-000000000000', '%ED%A0%BD', 'a'.repeat(65)) },
  );
const taskIds = () => [queuedTask, cancelledTask];
const runIds = () => [runningRun];

/** Serializes a body; Deep values become hand-written nesting. */
function serialize(body: unknown): string {
  const deep: number[] = [];
  const text = JSON.stringify(body, (_k, v: unknown) => (v instanceof Deep ? `__deep_${deep.push(v.depth) - 1}__` : v)) ?? 'null';
  return text.replace(/"__deep_(\d+)__"/g, (_m, i: string) => {
    const depth = deep[Number(i)]!;
    return '['.repeat(depth) + '"leaf"' + ']'.repeat(depth);
  });
}

/** A valid body with one path set to a hostile value, or removed; or a whole-body replacement. */
function mutated(valid: () => Record<string, unknown>, paths: string[]): fc.Arbitrary<string> {
  const setAt = fc.record({ path: fc.constantFrom(...paths, 'unknown_field'), value: hostileValue });
  return fc.oneof(
    { weight: 8, arbitrary: setAt.map(({ path, value }) => serialize(setPath(valid(), path, value))) },
    { weight: 2, arbitrary: fc.constantFrom(...paths).map((path) => serialize(setPath(valid(), path, undefined))) },
    { weight: 1, arbitrary: hostileValue.map(serialize) },
    { weight: 1, arbitrary: fc.constantFrom('{', '{"a":', '[1,]', '{"__proto__":{"x":1}}', '\u0000', '') },
    { weight: 1, arbitrary: fc.constant(serialize(valid())) },
  );
}

function setPath(body: Record<string, unknown>, path: string, value: unknown): Record<string, unknown> {
  const parts = path.split('.');
  let node: Record<string, unknown> = body;
  for (const part of parts.slice(0, -1)) {
    if (node[part] === null || typeof node[part] !== 'object') node[part] = {};
    node = node[part] as Record<string, unknown>;
  }
  if (value === undefined) delete node[parts.at(-1)!];
  else node[parts.at(-1)!] = value;
  return body;
}

// ---- the property -------------------------------------------------------------------------------------------

interface Request {
  method: 'GET' | 'POST' | 'DELETE';
  path: string;
  body?: string;
  headers?: Record<string, string>;
}

/** Sends the request, then checks: not a 5xx, a message on a refusal, and Redis untouched by a refusal. */
async function check(api: 'tasks' | 'runs', req: Request): Promise<void> {
  const auth: Record<string, string> = api === 'tasks' ? { authorization: `Bearer ${TEST_API_KEY}` } : { 'x-windie-runs-key': RUNS_KEY };
  const abort = new AbortController();
  const res = await fetch(`${stack.url}${req.path}`, {
    method: req.method,
    headers: { ...auth, ...(req.body === undefined ? {} : { 'content-type': 'application/json' }), ...req.headers },
    body: req.body,
    signal: abort.signal,
  });
  stats.requests++;
  const streaming = (res.headers.get('content-type') ?? '').startsWith('text/event-stream');
  if (streaming) abort.abort();
  const text = streaming ? '' : await res.text();
  const what = `${req.method} ${req.path.slice(0, 200)} ${req.body?.slice(0, 200) ?? ''} → ${res.status} ${text.slice(0, 300)}`;
  expect(res.status, what).toBeLessThan(500);
  const after = await dump();
  if (res.status >= 400) {
    stats.refused++;
    // Tasks: {error: {code, message}}; runs: FastAPI's detail (a message, or a list of {loc, msg}) and the same error.
    const body = JSON.parse(text) as { error?: { message?: unknown }; detail?: unknown };
    const detailed = typeof body.detail === 'string' || (Array.isArray(body.detail) && body.detail.length > 0);
    expect(detailed || typeof body.error?.message === 'string', what).toBe(true);
    expect(dumpDiff(baseline, after), what).toEqual([]);
  } else {
    stats.accepted++;
  }
  baseline = after;
}

const query = (fields: Record<string, string | null>): string => {
  const parts = Object.entries(fields).filter((e): e is [string, string] => e[1] !== null).map(([k, v]) => `${k}=${encodeURIComponent(v)}`);
  return parts.length ? `?${parts.join('&')}` : '';
};
const maybe = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: null });
const runOpts = (offset: number) => ({ seed: SEED + offset, numRuns: RUNS });

describe('fuzz: the tasks API', () => {
  const createBody = () => ({
    workspace_id: WS,
    goal: 'Weigh two options',
    team: { lead: { instructions: 'lead', model: 'm' }, workers: [{ role: 'pro', instructions: 'i', model: 'm', tools: ['calculate'] }], max_workers: 4 },
    metadata: { k: { k2: 'v' } },
  });
  const createPaths = ['workspace_id', 'goal', 'team', 'team.lead', 'team.lead.instructions', 'team.lead.model', 'team.workers', 'team.workers.0', 'team.workers.0.role',
    'team.workers.0.instructions', 'team.workers.0.model', 'team.workers.0.tools', 'team.workers.0.tools.0', 'team.max_workers', 'metadata', 'metadata.k', 'metadata.k.k2'];

  it('POST /api/tasks', async () => {
    const idem = maybe(fc.oneof(fc.constantFrom('', 'k'.repeat(256), 'fixed-key'), fc.stringMatching(/^[a-z0-9-]{1,40}$/)));
    await fc.assert(fc.asyncProperty(mutated(createBody, createPaths), idem, async (body, key) =>
      check('tasks', { method: 'POST', path: '/api/tasks', body, headers: key === null ? {} : { 'idempotency-key': key } })), runOpts(1));
  });

  it('GET /api/tasks/:id, its events and its stream', async () => {
    await fc.assert(fc.asyncProperty(id(taskIds), fc.constantFrom('', '/events', '/stream'), maybe(queryNumber), maybe(queryNumber), maybe(fc.constantFrom('x', '1e21', '99999999999999999999')),
      async (taskId, suffix, afterSeq, limit, lastEventId) =>
        check('tasks', { method: 'GET', path: `/api/tasks/${taskId}${suffix}${query({ after_seq: afterSeq, limit: suffix === '/events' ? limit : null })}`, headers: lastEventId === null ? {} : { 'last-event-id': lastEventId } })), runOpts(2));
  });

  it('POST /api/tasks/:id/cancel', async () => {
    // The queued task is left alone (a valid cancel would end it); ids are the cancelled task, unknown or hostile.
    await fc.assert(fc.asyncProperty(id(() => [cancelledTask]), mutated(() => ({ reason: 'stop' }), ['reason']), async (taskId, body) =>
      check('tasks', { method: 'POST', path: `/api/tasks/${taskId}/cancel`, body })), runOpts(3));
  });
});

describe('fuzz: the runs API', () => {
  it('POST /api/runs/ and /api/runs', async () => {
    const body = () => ({ workspace_id: WS, agent_id: 'a', query: 'q', requested_by: 'me', files: [{ artifact_id: 'f', filename: 'n', content_type: 't' }], metadata: { k: { k2: 1 } } });
    const paths = ['workspace_id', 'agent_id', 'query', 'requested_by', 'files', 'files.0', 'files.0.artifact_id', 'files.0.filename', 'metadata', 'metadata.k', 'metadata.k.k2'];
    await fc.assert(fc.asyncProperty(fc.constantFrom('/api/runs/', '/api/runs'), mutated(body, paths), maybe(fc.constantFrom('', 'k'.repeat(256), 'run-key')), async (path, b, key) =>
      check('runs', { method: 'POST', path, body: b, headers: key === null ? {} : { 'idempotency-key': key } })), runOpts(4));
  });

  it('GET /api/runs, /api/runs/:id, its events and its stream', async () => {
    await fc.assert(fc.asyncProperty(id(runIds), fc.constantFrom('', '/events', '/stream', 'list'), maybe(queryNumber), maybe(queryNumber), maybe(hostileString.filter((s) => s.isWellFormed())),
      async (runId, suffix, afterSeq, limit, ws) => {
        const path = suffix === 'list'
          ? `/api/runs${query({ workspace_id: ws, status: afterSeq })}`
          : `/api/runs/${runId}${suffix}${query({ after_seq: afterSeq, limit: suffix === '/events' ? limit : null })}`;
        await check('runs', { method: 'GET', path });
      }), runOpts(5));
  });

  it('POST /api/runs/workers/heartbeat', async () => {
    const body = () => ({ workspace_id: `${WS}-hb`, worker_id: 'vm-2', vm_id: 'v', user_id: 'u', session_id: 's', status: 'busy', metadata: { k: { k2: [1] } }, acked_command_ids: ['c1'] });
    const paths = ['workspace_id', 'worker_id', 'vm_id', 'user_id', 'session_id', 'status', 'metadata', 'metadata.k', 'metadata.k.k2', 'acked_command_ids', 'acked_command_ids.0'];
    await fc.assert(fc.asyncProperty(mutated(body, paths), async (b) => check('runs', { method: 'POST', path: '/api/runs/workers/heartbeat', body: b })), runOpts(6));
  });

  it('POST /api/runs/:id/worker-dispatched, /events and /control', async () => {
    const routes: Record<string, [() => Record<string, unknown>, string[]]> = {
      '/worker-dispatched': [() => ({ worker_id: 'vm-1', user_id: 'u', turn_ref: 't', conversation_ref: 'c', lease_id: 'l' }), ['worker_id', 'user_id', 'turn_ref', 'conversation_ref', 'lease_id']],
      // worker_id vm-9 does not hold the run: a well-formed relay is refused (409) rather than ending the fixture run.
      '/events': [() => ({ event_type: 'tool-result', source: 's', payload: { out: { deep: 'x' } }, worker_id: 'vm-9', batch_id: 'b' }), ['event_type', 'source', 'payload', 'payload.out', 'payload.out.deep', 'worker_id', 'lease_id', 'batch_id', 'events', 'events.0', 'events.0.payload']],
      '/control': [() => ({ action: 'set-control-mode', control_mode: 'bogus', requested_by: 'op' }), ['action', 'control_mode', 'requested_by']],
    };
    const request = fc.constantFrom(...Object.keys(routes)).chain((route) =>
      fc.tuple(fc.constant(route), id(runIds), mutated(...routes[route]!)));
    await fc.assert(fc.asyncProperty(request, async ([route, runId, body]) =>
      check('runs', { method: 'POST', path: `/api/runs/${runId}${route}`, body })), runOpts(7));
  });
});

describe('fuzz: the sessions API', () => {
  it('every route', async () => {
    const tool = { name: 't', description: 'd', parameters: { type: 'object', properties: { a: { type: 'string' } } }, timeout_ms: 1000, category: 'c' };
    const routes: Record<string, ['GET' | 'POST' | 'DELETE', () => Record<string, unknown>, string[]]> = {
      '': ['POST', () => ({ workspace_id: WS, model: 'm', tools: [tool], history: [{ role: 'user', content: 'hi' }], project_context: ['p'], system_context: 's', max_context_tokens: 1000 }),
        ['workspace_id', 'model', 'tools', 'tools.0', 'tools.0.name', 'tools.0.parameters', 'tools.0.parameters.properties', 'tools.0.timeout_ms', 'history', 'history.0', 'history.0.role', 'history.0.content', 'project_context', 'project_context.0', 'system_context', 'max_context_tokens']],
      '/messages': ['POST', () => ({ content: 'hello', message_id: 'm1', tools: [tool], system_context: 's' }), ['content', 'message_id', 'tools', 'tools.0.name', 'tools.0.parameters', 'system_context']],
      '/tool-results': ['POST', () => ({ tool_call_id: 'c1', success: true, result: 'r', exit_code: 0, truncated: false, duration_ms: 5 }), ['tool_call_id', 'success', 'result', 'exit_code', 'truncated', 'duration_ms']],
      '/tools': ['POST', () => ({ source: 's', tools: [tool], system_context: 's' }), ['source', 'tools', 'tools.0', 'tools.0.name', 'tools.0.parameters', 'system_context']],
      '/cancel': ['POST', () => ({ reason: 'r' }), ['reason']],
      'delete': ['DELETE', () => ({ reason: 'r' }), ['reason']],
      '/events': ['GET', () => ({}), []],
      '/stream': ['GET', () => ({}), []],
    };
    // Closing or cancelling the fixture session would end it: those two get unknown or hostile ids only.
    const request = fc.constantFrom(...Object.keys(routes)).chain((route) => {
      const [method, body, paths] = routes[route]!;
      const ids = route === 'delete' || route === '/cancel' ? id(() => ['00000000-0000-4000-8000-000000000000']) : id(() => [session]);
      return fc.tuple(fc.constant(route), fc.constant(method), ids, paths.length ? mutated(body, paths) : fc.constant(undefined), maybe(queryNumber));
    });
    await fc.assert(fc.asyncProperty(request, async ([route, method, sessionId, body, afterSeq]) => {
      const path = route === '' ? '/api/sessions' : route === 'delete' ? `/api/sessions/${sessionId}` : `/api/sessions/${sessionId}${route}${method === 'GET' ? query({ after_seq: afterSeq }) : ''}`;
      await check('tasks', { method, path, body });
    }), runOpts(11));
  });
});

describe('fuzz: health routes and unknown paths', () => {
  it('answer junk querystrings and paths without a 5xx', async () => {
    await fc.assert(fc.asyncProperty(fc.constantFrom('/healthz', '/readyz', '/metrics', '/api/nope', '/api/tasks/', '/api/runs/x/y/z'), encodedBytes, fc.constantFrom<'GET' | 'POST'>('GET', 'POST'),
      async (path, junk, method) => check('tasks', { method, path: `${path}?q=${junk}&${junk}`, body: method === 'POST' ? '{}' : undefined })), runOpts(8));
  });
});

describe('fuzz: WatchTeam', () => {
  it('never answers INTERNAL or UNKNOWN, and never writes', async () => {
    const client = grpcClient(stack.grpcTarget) as unknown as grpc.Client;
    const idText = fc.oneof(fc.constantFrom(queuedTask, cancelledTask), fc.uuid(), hostileString.map((s) => s.slice(0, 200)));
    const request = fc.oneof(
      { weight: 3, arbitrary: fc.tuple(idText, fc.bigInt({ min: 0n, max: 2n ** 64n - 1n })).map(([taskId, afterSeq]) => encodeWatchTeamRequest(taskId, afterSeq)) },
      { weight: 2, arbitrary: fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)) },
    );
    try {
      await fc.assert(fc.asyncProperty(request, fc.constantFrom<string | null>(TEST_API_KEY, TEST_API_KEY, 'wrong', null), async (bytes, key) => {
        // A valid watch of the queued task stays open: the short deadline ends it (DEADLINE_EXCEEDED is fine).
        const { status } = await rawWatchTeam(client, bytes, key, 300);
        const what = `${bytes.toString('hex').slice(0, 120)} key=${key} → ${status.code} ${status.details}`;
        expect([grpc.status.INTERNAL, grpc.status.UNKNOWN], what).not.toContain(status.code);
        expect(dumpDiff(baseline, await dump()), what).toEqual([]);
      }), runOpts(9));
    } finally {
      client.close();
    }
  });

  it('POST /api/runs/stop-all (last: a valid one stops the fixtures)', async () => {
    const body = () => ({ workspace_id: `${WS}-other`, requested_by: 'op' });
    await fc.assert(fc.asyncProperty(mutated(body, ['workspace_id', 'requested_by']), async (b) =>
      check('runs', { method: 'POST', path: '/api/runs/stop-all', body: b, headers: { 'x-windie-runs-control-key': CONTROL_KEY } })), runOpts(10));
  });

  it('sent a meaningful share of each kind of request', () => {
    // A fuzz run that refused everything would test only the first check; this one reaches handlers too.
    expect(stats.refused).toBeGreaterThan(300);
    expect(stats.accepted).toBeGreaterThan(40);
    console.log(`fuzz: ${stats.requests} HTTP requests, ${stats.refused} refused, ${stats.accepted} accepted`);
  });
});

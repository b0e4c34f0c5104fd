import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runsCall } from '@cadre/testing';
import { TestStack } from './support/stack.ts';
import { WindieBackend, WindieVmWorker } from './support/windie-vm-worker.ts';

// Per-workspace runs keys (RUNS_API_KEYS, as CADRE_API_KEYS for tasks): a workspace's VM agents see and write only
// their workspace; the original's shared key keeps reaching every workspace; stop-all beyond one workspace needs
// the control key. Every refusal is checked to change nothing.

const SHARED = 'shared-runs-key';
const CONTROL = 'control-key';
const tag = randomUUID().slice(0, 6);
const WS_A = `ws-a-${tag}`;
const WS_B = `ws-b-${tag}`;
const KEY_A = `key-a-${tag}`;
const KEY_B = `key-b-${tag}`;
let stack: TestStack;

beforeAll(async () => {
  stack = await TestStack.start({
    workers: 0,
    env: { RUNS_API_KEY: SHARED, RUNS_API_KEYS: `${WS_A}:${KEY_A},${WS_B}:${KEY_B}`, RUNS_CONTROL_API_KEY: CONTROL, RUNS_MAX_ACTIVE_PER_WORKSPACE: '10' },
  });
});
afterAll(async () => {
  await stack?.stop();
});

const as = (key: string) => (method: string, path: string, body?: unknown, headers: Record<string, string | null> = {}) => runsCall(stack.url, key, method, path, body, headers);
const shared = as(SHARED);

async function createIn(ws: string, key: string): Promise<string> {
  const res = await as(key)('POST', '/api/runs/', { workspace_id: ws, query: `work in ${ws}` });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.run.run_id;
}

/** A run and its whole log, read with the shared key. */
const snapshot = async (runId: string) => ({ run: (await shared('GET', `/api/runs/${runId}`)).body, events: (await shared('GET', `/api/runs/${runId}/events?limit=1000`)).body.events });

describe('per-workspace runs keys', () => {
  it("a workspace's key creates, lists and heartbeats in its workspace only (403 elsewhere, nothing written)", async () => {
    const a = as(KEY_A);
    const runA = await createIn(WS_A, KEY_A);
    const runB = await createIn(WS_B, KEY_B);
    const beforeB = await snapshot(runB);

    for (const [method, path, body] of [
      ['POST', '/api/runs/', { workspace_id: WS_B, query: 'not mine' }],
      ['POST', '/api/runs', { workspace_id: WS_B, query: 'not mine' }],
      ['GET', `/api/runs?workspace_id=${WS_B}`],
      ['POST', '/api/runs/workers/heartbeat', { workspace_id: WS_B, worker_id: 'vm-a', status: 'ready' }],
    ] as const) {
      const res = await a(method, path, body);
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(res.body.error.code).toBe('permission_denied');
    }
    expect(await snapshot(runB)).toEqual(beforeB);
    expect((await shared('GET', `/api/runs?workspace_id=${WS_B}`)).body.runs.map((r: any) => r.run_id)).toEqual([runB]);

    expect((await a('GET', `/api/runs?workspace_id=${WS_A}`)).body.runs.map((r: any) => r.run_id)).toEqual([runA]);
    const hb = await a('POST', '/api/runs/workers/heartbeat', { workspace_id: WS_A, worker_id: 'vm-a', status: 'ready' });
    expect(hb.body.assigned_run.run_id).toBe(runA);
  });

  it("another workspace's run is unknown to a workspace's key (404 on every route), and nothing changes", async () => {
    await createIn(WS_B, KEY_B);
    // Workspace B's worker takes its oldest waiting run.
    const runB: string = (await as(KEY_B)('POST', '/api/runs/workers/heartbeat', { workspace_id: WS_B, worker_id: 'vm-b', status: 'ready' })).body.assigned_run.run_id;
    const before = await snapshot(runB);
    const a = as(KEY_A);
    for (const [method, path, body] of [
      ['GET', `/api/runs/${runB}`],
      ['GET', `/api/runs/${runB}/events`],
      ['GET', `/api/runs/${runB}/stream`],
      ['POST', `/api/runs/${runB}/control`, { action: 'stop' }],
      ['POST', `/api/runs/${runB}/worker-dispatched`, { worker_id: 'vm-b' }],
      ['POST', `/api/runs/${runB}/events`, { event_type: 'streaming-complete' }],
    ] as const) {
      const res = await a(method, path, body);
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.body.detail).toBe('Run not found');
    }
    expect(await snapshot(runB)).toEqual(before);
    // Its own key and the shared key reach it.
    expect((await as(KEY_B)('GET', `/api/runs/${runB}`)).body.status).toBe('queued');
    expect((await shared('POST', `/api/runs/${runB}/worker-dispatched`, { worker_id: 'vm-b' })).body.run.status).toBe('running');
  });

  it('a worker written for WindieOS runs unchanged with its workspace key', async () => {
    const ws = WS_A;
    const runId = await createIn(ws, SHARED);
    const backend = new WindieBackend();
    backend.onQuery = async ({ conversationRef }) => {
      backend.emit({ type: 'streaming-complete', conversation_ref: conversationRef, payload: { final_response: 'done' } });
      return { ok: true, queryMessageId: 'msg-1' };
    };
    // Another worker of workspace A may still hold the first test's run: this one takes the next.
    const vm = new WindieVmWorker({ backendHttpUrl: stack.url, runsKey: KEY_A, workspaceId: ws, userId: 'windie-user', backend });
    vm.start();
    for (let i = 0; i < 50 && backend.queries.length === 0; i++) await vm.tick();
    await vm.settled();
    expect(vm.warnings).toEqual([]);
    expect((await shared('GET', `/api/runs/${runId}`)).body).toMatchObject({ status: 'completed', query_message_id: 'msg-1' });
    vm.stop();
  });

  it("stop-all: a workspace's key stops its own workspace only; beyond it (or with the shared key) the control key is needed", async () => {
    const runA = await createIn(WS_A, KEY_A);
    const runB = await createIn(WS_B, KEY_B);
    const stopAll = (body: unknown, headers: Record<string, string | null>) => shared('POST', '/api/runs/stop-all', body, { 'x-windie-runs-key': null, ...headers });
    const beforeA = await snapshot(runA);
    const beforeB = await snapshot(runB);
    for (const [body, headers] of [
      [{}, { 'x-windie-runs-key': KEY_A }],
      [{ workspace_id: null }, { 'x-windie-runs-key': KEY_A }],
      [{ workspace_id: WS_B }, { 'x-windie-runs-key': KEY_A }],
      [{ workspace_id: WS_A }, { 'x-windie-runs-key': SHARED }],
      [{ workspace_id: WS_A }, { 'x-windie-runs-key': 'wrong' }],
    ] as const) {
      const res = await stopAll(body, headers);
      expect(res.status, JSON.stringify([body, headers])).toBe(403);
    }
    expect(await snapshot(runA)).toEqual(beforeA);
    expect(await snapshot(runB)).toEqual(beforeB);

    const own = await stopAll({ workspace_id: WS_A, requested_by: 'agent-ops' }, { 'x-windie-runs-key': KEY_A });
    expect(own.status).toBe(200);
    expect(own.body.stopped_run_ids).toContain(runA);
    expect(own.body.stopped_run_ids).not.toContain(runB);
    expect((await snapshot(runB)).run.status).toBe('awaiting_worker');

    const everything = await stopAll({ requested_by: 'ops' }, { 'x-windie-runs-control-key': CONTROL });
    expect(everything.status).toBe(200);
    expect(everything.body.stopped_run_ids).toContain(runB);
  });

  it('a key accepted before keeps its reach; near misses of it stay refused; blanks around it still do not count', async () => {
    // KEY_A and the shared key have been accepted by the earlier tests, so these requests meet the remembered keys.
    for (const wrong of [`${KEY_A}x`, KEY_A.slice(0, -1), KEY_A.toUpperCase(), `${SHARED} ${KEY_A}`]) {
      const res = await as(wrong)('GET', `/api/runs?workspace_id=${WS_A}`);
      expect(res.status, wrong).toBe(401);
      expect(res.body.error.code).toBe('unauthenticated');
    }
    expect((await as(`  ${KEY_A} `)('GET', `/api/runs?workspace_id=${WS_A}`)).status).toBe(200);
    expect((await as(`  ${KEY_A} `)('GET', `/api/runs?workspace_id=${WS_B}`)).status).toBe(403);
    expect((await shared('GET', `/api/runs?workspace_id=${WS_B}`)).status).toBe(200);
  });

  it('a gateway with only workspace keys serves those workspaces; stop-all of its own workspace needs no control key', async () => {
    const gw = await stack.addGateway({ RUNS_API_KEY: '', RUNS_CONTROL_API_KEY: '' });
    const base = `http://127.0.0.1:${gw.port}`;
    const a = (method: string, path: string, body?: unknown, headers: Record<string, string | null> = {}) => runsCall(base, KEY_A, method, path, body, headers);
    expect((await runsCall(base, SHARED, 'GET', `/api/runs?workspace_id=${WS_A}`)).status).toBe(401);
    const runId = (await a('POST', '/api/runs/', { workspace_id: WS_A, query: 'scoped' })).body.run.run_id;
    expect((await a('POST', '/api/runs/stop-all', { workspace_id: WS_A })).body.stopped_run_ids).toContain(runId);
    const global = await a('POST', '/api/runs/stop-all', {});
    expect(global.status).toBe(503);
    expect(global.body.detail).toBe('Runs control API key is not configured');
  });
});

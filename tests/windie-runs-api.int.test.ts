import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runsCall } from '@cadre/testing';
import { TestStack } from './support/stack.ts';

// Conformance: every case of the original server's runs-API test suite (tests/backend/test_run_control_routes.py
// in buiilding/My_Own_OpenClaw), each as an HTTP test against a real gateway, written from reading it. The
// original calls its route functions directly for most cases; here each goes over the wire with the original's
// header. Where Cadre answers differently on purpose, the test says so (see the README's runs table).

const RUNS_KEY = 'runs-secret';
const CONTROL_KEY = 'control-secret';
let stack: TestStack;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 0, env: { RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: CONTROL_KEY } });
});
afterAll(async () => {
  await stack?.stop();
});

const headers = { 'x-windie-runs-key': RUNS_KEY };
/** A gateway on the same Redis with its own environment (the original's tests set env vars per case). */
async function gatewayWith(env: Record<string, string>): Promise<string> {
  return `http://127.0.0.1:${(await stack.addGateway(env)).port}`;
}
const at = (base: string) => (method: string, path: string, body?: unknown, h: Record<string, string | null> = {}) => runsCall(base, RUNS_KEY, method, path, body, h);
const call = (method: string, path: string, body?: unknown, h: Record<string, string | null> = {}) => at(stack.url)(method, path, body, h);
/** Each case gets its own workspace, as each original case gets its own service. */
const newWs = (): string => `workspace-demo-${randomUUID().slice(0, 8)}`;

async function create(ws: string, query: string, extra: Record<string, unknown> = {}) {
  const res = await call('POST', '/api/runs/', { workspace_id: ws, query, ...extra });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as { run: Record<string, any>; events: Record<string, any>[] };
}

const heartbeat = (body: Record<string, unknown>) => call('POST', '/api/runs/workers/heartbeat', body);
const stopAll = (body: unknown, h: Record<string, string | null>) => call('POST', '/api/runs/stop-all', body, { 'x-windie-runs-key': null, ...h });

/** The original's RunView, field for field; Cadre adds only these. */
const CADRE_RUN_FIELDS = ['assigned_at', 'attempts', 'dispatched_at', 'error', 'finished_at'];

describe('the original runs-API suite, over HTTP', () => {
  it('test_get_vm_run_control_service_is_singleton_for_concurrent_first_calls: concurrent first calls on fresh gateways share one registry', async () => {
    const [a, b] = await Promise.all([gatewayWith({}), gatewayWith({})]);
    const ws = newWs();
    const created = await at(a)('POST', '/api/runs/', { workspace_id: ws, query: 'first run' });
    const reads = await Promise.all(Array.from({ length: 8 }, (_, i) => at(i % 2 ? a : b)('GET', `/api/runs/${created.body.run.run_id}`)));
    for (const read of reads) expect(read.body).toEqual(created.body.run);
  });

  it('test_create_run_returns_initial_state_and_created_event', async () => {
    const ws = newWs();
    const res = await create(ws, 'apply this internship job for me', {
      requested_by: 'user_123',
      files: [{ artifact_id: 'resume-1.png', filename: 'resume.pdf', content_type: 'application/pdf' }],
    });
    expect(res.run.workspace_id).toBe(ws);
    expect(res.run.status).toBe('awaiting_worker');
    expect(res.run.control_mode).toBe('agent_only');
    expect(res.run.conversation_ref.startsWith('run-')).toBe(true);
    expect(res.events.length).toBeGreaterThan(0);
    expect(res.events[0]).toMatchObject({ event_type: 'run-created', seq: 1, source: 'api' });
  });

  it('test_create_run_rejects_when_workspace_active_limit_reached', async () => {
    const ws = newWs();
    await create(ws, 'first run');
    const second = await call('POST', '/api/runs/', { workspace_id: ws, query: 'second run' });
    expect(second.status).toBe(409);
    expect(second.body.detail).toBe(`Active run limit reached for workspace '${ws}' (1).`);
  });

  it('test_control_run_requires_control_mode_for_set_control_mode_action', async () => {
    const { run } = await create(newWs(), 'run browser task');
    for (const body of [{ action: 'set-control-mode' }, { action: 'set-control-mode', control_mode: null }]) {
      const res = await call('POST', `/api/runs/${run.run_id}/control`, body);
      expect(res.status).toBe(422);
      expect(res.body.detail).toBe('control_mode is required when action is set-control-mode');
    }
  });

  it('test_worker_poll_heartbeat_assigns_pending_run', async () => {
    const ws = newWs();
    const { run } = await create(ws, 'submit internship application', { agent_id: 'agent-alpha' });
    const hb = await heartbeat({ workspace_id: ws, worker_id: 'worker-alpha', vm_id: 'vm-alpha', user_id: 'vm-user-alpha', session_id: 'session-alpha', status: 'ready' });
    expect(hb.body.assigned_run).not.toBeNull();
    expect(hb.body.assigned_run.run_id).toBe(run.run_id);
    const got = (await call('GET', `/api/runs/${run.run_id}`)).body;
    expect(got.status).toBe('queued');
    expect(got.worker).not.toBeNull();
    expect(got.worker.worker_id).toBe('worker-alpha');
  });

  it('test_worker_dispatched_updates_running_state_and_turn_ref', async () => {
    const ws = newWs();
    const { run } = await create(ws, 'submit internship application');
    await heartbeat({ workspace_id: ws, worker_id: 'worker-1', vm_id: 'vm-1', user_id: 'vm-user-1', session_id: 'session-1', status: 'ready' });
    const res = await call('POST', `/api/runs/${run.run_id}/worker-dispatched`, { worker_id: 'worker-1', user_id: 'vm-user-1', turn_ref: 'turn-abc-123' });
    expect(res.body.run.status).toBe('running');
    expect(res.body.run.query_message_id).toBe('turn-abc-123');
    expect(res.body.latest_event.event_type).toBe('run-dispatched');
  });

  it('test_ingest_run_event_marks_run_completed_on_streaming_complete', async () => {
    const { run } = await create(newWs(), 'process files');
    expect((await call('POST', `/api/runs/${run.run_id}/events`, { event_type: 'streaming-response', payload: { payload: { text: 'hello' } } })).status).toBe(200);
    const done = await call('POST', `/api/runs/${run.run_id}/events`, { event_type: 'streaming-complete', payload: { payload: { final_response: 'done' } } });
    expect(done.body.run.status).toBe('completed');
    expect(done.body.latest_event.event_type).toBe('streaming-complete');
    // The original's default source for a relay.
    expect(done.body.latest_event.source).toBe('worker-stream');
  });

  it('test_list_run_events_filters_by_after_seq', async () => {
    const { run } = await create(newWs(), 'process files');
    await call('POST', `/api/runs/${run.run_id}/control`, { action: 'pause', requested_by: 'tester' });
    await call('POST', `/api/runs/${run.run_id}/control`, { action: 'resume', requested_by: 'tester' });
    const events = (await call('GET', `/api/runs/${run.run_id}/events?after_seq=1&limit=50`)).body;
    expect(events.run_id).toBe(run.run_id);
    // The original's latest version also logs three `trace_event`s (path run.control) here; Cadre keeps no
    // trace events in the run's log, so the control events are all there is.
    expect(events.events.map((e: any) => e.event_type)).toEqual(['run-control', 'run-control']);
    expect(events.events.map((e: any) => e.payload.action)).toEqual(['pause', 'resume']);
    expect(events.events[0].payload).toMatchObject({ action: 'pause', control_mode: 'agent_only', status: 'paused', requested_by: 'tester' });
    expect(events.next_after_seq).toBe(events.events.at(-1).seq);
  });

  it('test_worker_poll_heartbeat_returns_pending_control_commands_once', async () => {
    const ws = newWs();
    const { run } = await create(ws, 'process files');
    const worker = { workspace_id: ws, worker_id: 'worker-control', vm_id: 'vm-control', user_id: 'vm-user-control' };
    await heartbeat({ ...worker, status: 'ready' });
    await call('POST', `/api/runs/${run.run_id}/control`, { action: 'pause', requested_by: 'tester' });
    const first = await heartbeat({ ...worker, status: 'running' });
    const second = await heartbeat({ ...worker, status: 'running' });
    expect(first.body.control_commands).toHaveLength(1);
    expect(first.body.control_commands[0]).toMatchObject({ action: 'pause', run_id: run.run_id, requested_by: 'tester', control_mode: 'agent_only' });
    expect(second.body.control_commands).toEqual([]);
  });

  it('test_stop_all_runs_sets_matching_active_runs_to_stopped', async () => {
    const base = await gatewayWith({ RUNS_MAX_ACTIVE_PER_WORKSPACE: '4' });
    const ws = newWs();
    const other = newWs();
    const runA = (await at(base)('POST', '/api/runs/', { workspace_id: ws, query: 'run A' })).body.run;
    const runB = (await at(base)('POST', '/api/runs/', { workspace_id: ws, query: 'run B' })).body.run;
    const runOther = (await at(base)('POST', '/api/runs/', { workspace_id: other, query: 'run C' })).body.run;
    const res = await stopAll({ workspace_id: ws, requested_by: 'tester' }, { 'x-windie-runs-control-key': CONTROL_KEY });
    expect(res.body.count).toBe(2);
    expect(new Set(res.body.stopped_run_ids)).toEqual(new Set([runA.run_id, runB.run_id]));
    expect((await call('GET', `/api/runs/${runA.run_id}`)).body.status).toBe('stopped');
    expect((await call('GET', `/api/runs/${runB.run_id}`)).body.status).toBe('stopped');
    expect((await call('GET', `/api/runs/${runOther.run_id}`)).body.status).toBe('awaiting_worker');
  });

  it('test_verify_runs_api_key_respects_demo_key_env', async () => {
    const demo = await gatewayWith({ RUNS_API_KEY: '', WINDIE_DEMO_API_KEY: 'demo-key' });
    const unknown = `/api/runs/${randomUUID()}`;
    expect((await at(demo)('GET', unknown, undefined, { 'x-windie-runs-key': 'demo-key' })).status).toBe(404);
    expect((await at(demo)('GET', unknown, undefined, { 'x-windie-runs-key': 'wrong-key' })).status).toBe(401);
    const none = await gatewayWith({ RUNS_API_KEY: '', WINDIE_DEMO_API_KEY: '' });
    expect((await at(none)('GET', unknown, undefined, { 'x-windie-runs-key': null })).status).toBe(503);
  });

  it('test_runs_routes_fail_closed_when_key_is_not_configured', async () => {
    const none = await gatewayWith({ RUNS_API_KEY: '' });
    const created = await at(none)('POST', '/api/runs/', { workspace_id: newWs(), query: 'run this' }, { 'x-windie-runs-key': null });
    const read = await at(none)('GET', '/api/runs/missing-run', undefined, { 'x-windie-runs-key': null });
    expect(created.status).toBe(503);
    expect(created.body.detail).toBe('Runs API key is not configured');
    expect(read.status).toBe(503);
    expect(read.body.detail).toBe('Runs API key is not configured');
  });

  it('test_runs_routes_require_matching_key_when_configured', async () => {
    const ws = newWs();
    const missing = await call('POST', '/api/runs/', { workspace_id: ws, query: 'run this' }, { 'x-windie-runs-key': null });
    const wrong = await call('POST', '/api/runs/', { workspace_id: ws, query: 'run this' }, { 'x-windie-runs-key': 'wrong' });
    const created = await call('POST', '/api/runs/', { workspace_id: ws, query: 'run this' }, headers);
    const runId = created.body.run.run_id;
    const read = await call('GET', `/api/runs/${runId}`, undefined, headers);
    expect(missing.status).toBe(401);
    expect(wrong.status).toBe(401);
    expect(created.status).toBe(200);
    expect(read.status).toBe(200);
    expect(read.body.run_id).toBe(runId);
  });

  it('test_get_run_route_network_contract', async () => {
    const ws = newWs();
    const created = await call('POST', '/api/runs/', { workspace_id: ws, query: 'run this', requested_by: 'tester' }, headers);
    const runId = created.body.run.run_id;
    const success = await call('GET', `/api/runs/${runId}`, undefined, headers);
    const missing = await call('GET', '/api/runs/missing-run', undefined, headers);
    const missingKey = await call('GET', `/api/runs/${runId}`, undefined, { 'x-windie-runs-key': null });
    const wrongKey = await call('GET', `/api/runs/${runId}`, undefined, { 'x-windie-runs-key': 'wrong' });

    expect(success.status).toBe(200);
    const original = Object.fromEntries(Object.entries(success.body).filter(([k]) => !CADRE_RUN_FIELDS.includes(k)));
    expect(original).toEqual({
      run_id: runId,
      workspace_id: ws,
      status: 'awaiting_worker',
      control_mode: 'agent_only',
      query: 'run this',
      agent_id: null,
      requested_by: 'tester',
      created_at: created.body.run.created_at,
      updated_at: created.body.run.updated_at,
      worker: null,
      conversation_ref: created.body.run.conversation_ref,
      query_message_id: null,
      files: [],
      metadata: {},
      // The original's latest version counts a trace_event too (2); Cadre's log has run-created alone.
      last_event_seq: 1,
      last_heartbeat_at: null,
    });
    expect(Object.keys(success.body).filter((k) => CADRE_RUN_FIELDS.includes(k)).sort()).toEqual(CADRE_RUN_FIELDS);
    expect(missing.status).toBe(404);
    expect(missing.body.detail).toBe('Run not found');
    expect(missingKey.status).toBe(401);
    expect(wrongKey.status).toBe(401);
  });

  it('test_worker_dispatched_route_requires_key_and_acknowledges_run', async () => {
    const ws = newWs();
    const runId = (await call('POST', '/api/runs/', { workspace_id: ws, query: 'run this' }, headers)).body.run.run_id;
    await call('POST', '/api/runs/workers/heartbeat', { workspace_id: ws, worker_id: 'worker-route', vm_id: 'vm-route', user_id: 'vm-user-route', session_id: 'session-route', status: 'ready' }, headers);
    const missingKey = await call('POST', `/api/runs/${runId}/worker-dispatched`, { worker_id: 'worker-route', user_id: 'vm-user-route' }, { 'x-windie-runs-key': null });
    const dispatched = await call('POST', `/api/runs/${runId}/worker-dispatched`, { worker_id: 'worker-route', user_id: 'vm-user-route', turn_ref: 'turn-route', conversation_ref: 'conv-route' }, headers);
    expect(missingKey.status).toBe(401);
    expect(dispatched.status).toBe(200);
    expect(dispatched.body.run.run_id).toBe(runId);
    expect(dispatched.body.run.status).toBe('running');
    expect(dispatched.body.run.query_message_id).toBe('turn-route');
    expect(dispatched.body.latest_event.event_type).toBe('run-dispatched');
    // As the original, the ack's conversation_ref becomes the run's.
    expect(dispatched.body.run.conversation_ref).toBe('conv-route');
  });

  it('test_stop_all_requires_distinct_control_key', async () => {
    const ws = newWs();
    const runId = (await create(ws, 'run this')).run.run_id;
    const other = newWs();
    const otherRun = (await create(other, 'run that')).run.run_id;
    const ordinary = await stopAll({ workspace_id: other, requested_by: 'tester' }, { 'x-windie-runs-key': RUNS_KEY });
    const wrongControl = await stopAll({ workspace_id: other, requested_by: 'tester' }, { 'x-windie-runs-control-key': 'wrong' });
    const control = await stopAll({ workspace_id: ws, requested_by: 'tester' }, { 'x-windie-runs-control-key': CONTROL_KEY });
    expect(ordinary.status).toBe(403);
    expect(wrongControl.status).toBe(403);
    expect(control.status).toBe(200);
    // The original's three fields; Cadre adds the team tasks the stop cancelled.
    expect(control.body).toEqual({ workspace_id: ws, stopped_run_ids: [runId], count: 1, stopped_task_ids: [] });
    expect((await call('GET', `/api/runs/${runId}/events`)).body.events.at(-1).payload).toMatchObject({ action: 'stop', requested_by: 'tester', bulk: true });
    expect((await call('GET', `/api/runs/${otherRun}`)).body.status).toBe('awaiting_worker');
  });

  it('test_stop_all_fails_closed_when_control_key_is_not_configured', async () => {
    const base = await gatewayWith({ RUNS_CONTROL_API_KEY: '' });
    const res = await at(base)('POST', '/api/runs/stop-all', { workspace_id: newWs() }, headers);
    expect(res.status).toBe(503);
    expect(res.body.detail).toBe('Runs control API key is not configured');
  });

  it('test_get_run_returns_404_for_unknown_id', async () => {
    const res = await call('GET', '/api/runs/missing-run');
    expect(res.status).toBe(404);
    expect(res.body.detail).toBe('Run not found');
  });
});

describe("what the original's models allow", () => {
  it('takes an explicit null for every field the original declares Optional', async () => {
    const ws = newWs();
    const created = await call('POST', '/api/runs/', { workspace_id: ws, query: 'nulls', agent_id: null, requested_by: null, files: [{ artifact_id: 'a.pdf', filename: null, content_type: null }], metadata: {} });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    expect(created.body.run).toMatchObject({ agent_id: null, requested_by: null, files: [{ artifact_id: 'a.pdf', filename: null, content_type: null }] });
    const runId = created.body.run.run_id;
    const hb = await heartbeat({ workspace_id: ws, worker_id: 'w-null', vm_id: 'vm', user_id: 'u', session_id: null, agent_id: null, status: 'ready', metadata: {} });
    expect(hb.status, JSON.stringify(hb.body)).toBe(200);
    expect(hb.body.worker).toMatchObject({ session_id: null, agent_id: null });
    expect(hb.body.assigned_run).toMatchObject({ run_id: runId, agent_id: null, requested_by: null });
    const dispatched = await call('POST', `/api/runs/${runId}/worker-dispatched`, { worker_id: 'w-null', user_id: 'u', turn_ref: 't', conversation_ref: null });
    expect(dispatched.status, JSON.stringify(dispatched.body)).toBe(200);
    expect(dispatched.body.run.conversation_ref).toBe(`run-${runId}`);
    const paused = await call('POST', `/api/runs/${runId}/control`, { action: 'pause', requested_by: null, control_mode: null });
    expect(paused.status, JSON.stringify(paused.body)).toBe(200);
    expect(paused.body.latest_event.payload).toMatchObject({ action: 'pause', requested_by: null });
    const stopped = await stopAll({ workspace_id: ws, requested_by: null }, { 'x-windie-runs-control-key': CONTROL_KEY });
    expect(stopped.body).toMatchObject({ workspace_id: ws, stopped_run_ids: [runId], count: 1 });
    expect((await stopAll({ workspace_id: null, requested_by: null }, { 'x-windie-runs-control-key': CONTROL_KEY })).status).toBe(200);
  });

  it('refuses null where the original requires a value, with its 422 detail list', async () => {
    for (const body of [{ workspace_id: null, query: 'q' }, { workspace_id: newWs(), query: null }, { workspace_id: newWs(), query: 'q', metadata: null }]) {
      const res = await call('POST', '/api/runs/', body);
      expect(res.status, JSON.stringify(body)).toBe(422);
      expect(res.body.detail[0]).toEqual({ loc: expect.arrayContaining(['body']), msg: expect.any(String), type: expect.any(String) });
    }
    const missing = await call('POST', '/api/runs/', { workspace_id: newWs() });
    expect(missing.body.detail).toEqual([{ loc: ['body', 'query'], msg: 'Field required', type: 'missing' }]);
  });
});

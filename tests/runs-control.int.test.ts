import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertContiguous, runsCall, waitUntil } from '@cadre/testing';
import { TestStack } from './support/stack.ts';

// The runs API as its users see it: a seed-style VM worker and an operator, both plain HTTP with the original's
// header. Every refused request is checked to change nothing (the run and its whole log are compared).

const RUNS_KEY = 'runs-control-test-key';
const CONTROL_KEY = 'runs-control-operator-key';
let stack: TestStack;
/** A gateway on the same Redis with RUNS_MAX_ACTIVE_PER_WORKSPACE=5 (the main one has the default cap 1). */
let five: string;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 0, env: { RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: CONTROL_KEY, RUNS_HEARTBEAT_INTERVAL_MS: '100' } });
  five = `http://127.0.0.1:${(await stack.addGateway({ RUNS_MAX_ACTIVE_PER_WORKSPACE: '5' })).port}`;
});
afterAll(async () => {
  await stack?.stop();
});

type Res = { status: number; body: Record<string, any> };

const call = (method: string, path: string, body?: unknown, headers: Record<string, string | null> = {}, base = stack.url): Promise<Res> =>
  runsCall(base, RUNS_KEY, method, path, body, headers);

const newWs = (): string => `ws-${randomUUID().slice(0, 8)}`;
const UNKNOWN = '00000000-0000-4000-8000-000000000000';

async function createRun(ws: string, extra: Record<string, unknown> = {}, base = stack.url): Promise<string> {
  const res = await call('POST', '/api/runs/', { workspace_id: ws, query: 'do the thing', ...extra }, {}, base);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.run.run_id;
}

const heartbeat = (ws: string, workerId: string, extra: Record<string, unknown> = {}): Promise<Res> =>
  call('POST', '/api/runs/workers/heartbeat', { workspace_id: ws, worker_id: workerId, status: 'ready', ...extra });
const control = (runId: string, body: Record<string, unknown>): Promise<Res> => call('POST', `/api/runs/${runId}/control`, body);
const relay = (runId: string, body: Record<string, unknown>): Promise<Res> => call('POST', `/api/runs/${runId}/events`, body);
const dispatch = (runId: string, workerId: string, extra: Record<string, unknown> = {}): Promise<Res> =>
  call('POST', `/api/runs/${runId}/worker-dispatched`, { worker_id: workerId, turn_ref: 'turn-1', ...extra });

async function getRun(runId: string): Promise<Record<string, any>> {
  const res = await call('GET', `/api/runs/${runId}`);
  expect(res.status).toBe(200);
  return res.body;
}

async function allEvents(runId: string): Promise<any[]> {
  const res = await call('GET', `/api/runs/${runId}/events?after_seq=0&limit=1000`);
  expect(res.status).toBe(200);
  return res.body.events;
}

const snapshot = async (runId: string) => ({ run: await getRun(runId), events: await allEvents(runId) });

/** The request is refused with `status` and the error shape, and the run and its log are exactly as before. */
async function expectRefused(runId: string, status: number, request: () => Promise<Res>): Promise<Res> {
  const before = await snapshot(runId);
  const res = await request();
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expectErrorShape(res);
  expect(await snapshot(runId)).toEqual(before);
  return res;
}

/** FastAPI's `detail` (a string, or for an invalid request the list of problems) and Cadre's `error`. */
function expectErrorShape(res: Res): void {
  if (Array.isArray(res.body.detail)) {
    expect(res.status).toBe(422);
    for (const d of res.body.detail) expect(d).toEqual({ loc: expect.any(Array), msg: expect.any(String), type: expect.any(String) });
    expect(res.body.error).toEqual({ code: 'invalid_argument', message: expect.any(String) });
  } else {
    expect(typeof res.body.detail).toBe('string');
    expect(res.body.error).toEqual({ code: expect.any(String), message: res.body.detail });
  }
}

/** Builds a run in the named state, in its own workspace; `worker` is the bound worker, if any. */
async function runIn(state: string): Promise<{ ws: string; runId: string; worker: string }> {
  const ws = newWs();
  const worker = `vm-${ws}`;
  const runId = await createRun(ws);
  const assign = async () => expect((await heartbeat(ws, worker)).body.assigned_run.run_id).toBe(runId);
  switch (state) {
    case 'awaiting_worker':
      break;
    case 'queued':
      await assign();
      break;
    case 'running':
      await assign();
      expect((await dispatch(runId, worker)).body.run.status).toBe('running');
      break;
    case 'paused (unassigned)':
      expect((await control(runId, { action: 'pause' })).body.run.status).toBe('paused');
      break;
    case 'paused (from queued)':
      await assign();
      expect((await control(runId, { action: 'pause' })).body.run.status).toBe('paused');
      break;
    case 'paused (from running)':
      await assign();
      await dispatch(runId, worker);
      expect((await control(runId, { action: 'pause' })).body.run.status).toBe('paused');
      break;
    case 'stopped':
      await assign();
      await dispatch(runId, worker);
      expect((await control(runId, { action: 'stop' })).body.run.status).toBe('stopped');
      break;
    case 'completed':
      await assign();
      await dispatch(runId, worker);
      expect((await relay(runId, { event_type: 'streaming-complete', source: 'worker-stream', payload: {} })).body.run.status).toBe('completed');
      break;
    case 'failed':
      await assign();
      await dispatch(runId, worker);
      expect((await relay(runId, { event_type: 'error', source: 'worker-stream', payload: { message: 'boom' } })).body.run.status).toBe('failed');
      break;
    default:
      throw new Error(state);
  }
  // Drain the commands building the state produced, so each case sees only its own.
  await heartbeat(ws, worker, { status: 'busy' });
  expect((await getRun(runId)).status).toBe(state.split(' ')[0]);
  return { ws, runId, worker };
}

describe('guarded transitions', () => {
  // What each control action does in each state, as controlRun-1.lua's header says; null = 409, nothing changed.
  const table: Record<string, Record<string, string | null>> = {
    awaiting_worker: { pause: 'paused', resume: null, stop: 'stopped', 'set-control-mode': 'awaiting_worker' },
    queued: { pause: 'paused', resume: null, stop: 'stopped', 'set-control-mode': 'queued' },
    running: { pause: 'paused', resume: null, stop: 'stopped', 'set-control-mode': 'running' },
    'paused (unassigned)': { pause: null, resume: 'awaiting_worker', stop: 'stopped', 'set-control-mode': 'paused' },
    'paused (from queued)': { pause: null, resume: 'queued', stop: 'stopped', 'set-control-mode': 'paused' },
    'paused (from running)': { pause: null, resume: 'running', stop: 'stopped', 'set-control-mode': 'paused' },
    stopped: { pause: null, resume: null, stop: null, 'set-control-mode': null },
    completed: { pause: null, resume: null, stop: null, 'set-control-mode': null },
    failed: { pause: null, resume: null, stop: null, 'set-control-mode': null },
  };
  const cases = Object.entries(table).flatMap(([state, actions]) => Object.entries(actions).map(([action, to]) => ({ state, action, to })));

  it.each(cases)('$action on a $state run → $to', async ({ state, action, to }) => {
    const { ws, runId, worker } = await runIn(state);
    const body = { action, requested_by: 'op-1', ...(action === 'set-control-mode' ? { control_mode: 'shared_control' } : {}) };
    if (to === null) {
      const res = await expectRefused(runId, 409, () => control(runId, body));
      expect(res.body.error.code).toBe('conflict');
      // And the worker is told nothing.
      expect((await heartbeat(ws, worker, { status: 'busy' })).body.control_commands).toEqual([]);
      return;
    }
    const before = await getRun(runId);
    const res = await control(runId, body);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.run).toMatchObject({ run_id: runId, status: to, control_mode: action === 'set-control-mode' ? 'shared_control' : 'agent_only' });
    expect(await getRun(runId)).toEqual(res.body.run);
    const events = await allEvents(runId);
    expect(events.length).toBe(before.last_event_seq + 1);
    expect(res.body.latest_event).toEqual(events.at(-1));
    const mode = res.body.run.control_mode;
    expect(events.at(-1)).toMatchObject({ event_type: 'run-control', source: 'api', payload: { action, requested_by: 'op-1', status: to, control_mode: mode } });
    // A bound run's worker gets the command on its next heartbeat; an unbound run has nobody to tell.
    const commands = (await heartbeat(ws, worker, { status: 'busy' })).body.control_commands;
    if (before.worker) {
      expect(commands).toEqual([expect.objectContaining({ run_id: runId, action, requested_by: 'op-1', control_mode: mode, command_id: events.at(-1).payload.command_id })]);
    } else {
      expect(commands).toEqual([]);
      expect(events.at(-1).payload.command_id).toBeNull();
    }
  });

  // What a relay from the holder does in each state: it is always recorded (a worker's events race each other
  // and the run's end); only its effect on the status depends on the state. [state, tool-call →, streaming-complete →, error →]
  const relayTable: [string, string, string, string][] = [
    ['awaiting_worker', 'awaiting_worker', 'completed', 'failed'],
    ['queued', 'running', 'completed', 'failed'],
    ['running', 'running', 'completed', 'failed'],
    ['paused (unassigned)', 'paused', 'completed', 'failed'],
    ['paused (from queued)', 'paused', 'completed', 'failed'],
    ['paused (from running)', 'paused', 'completed', 'failed'],
    ['stopped', 'stopped', 'stopped', 'stopped'],
    ['completed', 'completed', 'completed', 'completed'],
    ['failed', 'failed', 'failed', 'failed'],
  ];
  it.each(relayTable)('records every relay into a %s run: tool-call → %s, streaming-complete → %s, error → %s', async (state, afterChunk, afterComplete, afterError) => {
    for (const [body, to] of [
      [{ event_type: 'tool-call', source: 'worker-stream', payload: { n: 1 } }, afterChunk],
      [{ event_type: 'streaming-complete', source: 'worker-stream', payload: {} }, afterComplete],
      [{ event_type: 'error', source: 'worker-stream', payload: { message: 'late' } }, afterError],
    ] as const) {
      const { runId } = await runIn(state);
      const before = await snapshot(runId);
      const res = await relay(runId, body);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.run.status).toBe(to);
      expect(res.body.latest_event).toMatchObject({ seq: before.run.last_event_seq + 1, event_type: body.event_type, source: 'worker-stream', payload: body.payload });
      const after = await snapshot(runId);
      expect(after.events).toEqual([...before.events, res.body.latest_event]);
      // A run that had ended keeps how it ended.
      if (['stopped', 'completed', 'failed'].includes(state)) expect(after.run).toMatchObject({ status: state, error: before.run.error, finished_at: before.run.finished_at });
    }
  });

  it('takes the dispatch ack from the holder in any state and refuses anyone else with 404 (as the original); a repeated ack changes nothing', async () => {
    const ws = newWs();
    const runId = await createRun(ws);
    // Nobody holds it yet.
    const nobody = await expectRefused(runId, 404, () => dispatch(runId, 'vm-a'));
    expect(nobody.body.detail).toBe('Run not found or worker mismatch');
    const assigned = (await call('POST', '/api/runs/workers/heartbeat', { workspace_id: ws, worker_id: 'vm-a', user_id: 'u', status: 'ready' })).body.assigned_run;
    expect(assigned.run_id).toBe(runId);
    await expectRefused(runId, 404, () => dispatch(runId, 'vm-b'));
    await expectRefused(runId, 404, () => dispatch(runId, 'vm-a', { lease_id: 'L-not-mine' }));
    await expectRefused(runId, 404, () => dispatch(runId, 'vm-a', { user_id: 'someone-else' }));
    const ok = await dispatch(runId, 'vm-a', { lease_id: assigned.lease_id, user_id: 'u', conversation_ref: `run-${runId}` });
    expect(ok.status).toBe(200);
    expect(ok.body.run).toMatchObject({ status: 'running', worker: expect.objectContaining({ worker_id: 'vm-a' }), query_message_id: 'turn-1' });
    expect(ok.body.latest_event).toMatchObject({ event_type: 'run-dispatched', source: 'worker', payload: { worker_id: 'vm-a', user_id: 'u', turn_ref: 'turn-1' } });
    // The holder retrying after a lost reply gets 200 and the same event; nothing is written.
    for (const retry of [() => dispatch(runId, 'vm-a'), () => dispatch(runId, 'vm-a', { lease_id: assigned.lease_id })]) {
      const before = await snapshot(runId);
      const again = await retry();
      expect(again.status).toBe(200);
      expect(again.body.latest_event).toEqual(ok.body.latest_event);
      expect(await snapshot(runId)).toEqual(before);
    }
    await expectRefused(runId, 404, () => dispatch(runId, 'vm-b'));
    // A relay naming another worker or lease is refused (409); naming the holder (or nobody, as the original) works.
    await expectRefused(runId, 409, () => relay(runId, { event_type: 'tool-call', worker_id: 'vm-b' }));
    await expectRefused(runId, 409, () => relay(runId, { event_type: 'tool-call', worker_id: 'vm-a', lease_id: 'L-not-mine' }));
    expect((await relay(runId, { event_type: 'tool-call', worker_id: 'vm-a', lease_id: assigned.lease_id })).status).toBe(200);
    expect((await relay(runId, { event_type: 'tool-call' })).status).toBe(200);

    // The original worker acks only after its query went out: the run may be paused or over by then. The ack is
    // recorded; the status stays, and a run paused before it resumes as running.
    for (const state of ['paused (from queued)', 'stopped', 'completed', 'failed']) {
      const built = await runIn(state.startsWith('paused') ? 'queued' : state);
      if (state.startsWith('paused')) await control(built.runId, { action: 'pause' });
      const res = await dispatch(built.runId, built.worker, { turn_ref: 'turn-late' });
      expect(res.status, state).toBe(200);
      expect(res.body.run).toMatchObject({ status: state.split(' ')[0], query_message_id: state === 'paused (from queued)' ? 'turn-late' : 'turn-1' });
      if (state.startsWith('paused')) expect((await control(built.runId, { action: 'resume' })).body.run.status).toBe('running');
    }
  });

  it('answers 422 for set-control-mode without or with an invalid control_mode and for unknown actions, changing nothing', async () => {
    const { runId } = await runIn('running');
    for (const body of [
      { action: 'set-control-mode' },
      { action: 'set-control-mode', control_mode: 'full_auto' },
      { action: 'set-control-mode', control_mode: '' },
      { action: 'explode' },
      { action: 'Pause' },
      {},
      { action: 'pause', surprise: true },
    ]) {
      await expectRefused(runId, 422, () => control(runId, body));
    }
    for (const other of ['not-a-uuid', UNKNOWN.toUpperCase(), `{${UNKNOWN}}`, runId.toUpperCase(), runId.replaceAll('-', '')]) {
      const res = await expectRefused(runId, 404, () => call('POST', `/api/runs/${encodeURIComponent(other)}/control`, { action: 'pause' }));
      expect(res.body.detail).toBe('Run not found');
    }
    const missing = await control(UNKNOWN, { action: 'pause' });
    expect(missing.status).toBe(404);
    expectErrorShape(missing);
  });

  it('pausing an unassigned run takes it out of the queue; resuming puts it back and the next heartbeat assigns it', async () => {
    const ws = newWs();
    const runId = await createRun(ws);
    await control(runId, { action: 'pause' });
    expect((await heartbeat(ws, 'vm-1')).body.assigned_run).toBeNull();
    expect((await heartbeat(ws, 'vm-2', { status: 'running' })).body.assigned_run).toBeNull();
    expect((await getRun(runId)).status).toBe('paused');
    expect((await control(runId, { action: 'resume' })).body.run).toMatchObject({ status: 'awaiting_worker', worker: null });
    const hb = await heartbeat(ws, 'vm-1');
    expect(hb.body.assigned_run).toMatchObject({ run_id: runId });
    expect(await getRun(runId)).toMatchObject({ status: 'queued', worker: expect.objectContaining({ worker_id: 'vm-1' }) });
    expect((await allEvents(runId)).map((e) => e.event_type)).toEqual(['run-created', 'run-control', 'run-control', 'run-worker-assigned']);
  });

  it('assigns FIFO across runs, one per worker, and a resumed run goes back ahead of the runs created after it', async () => {
    const ws = newWs();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await createRun(ws, { query: `job ${i}` }, five));
    expect((await call('POST', '/api/runs/', { workspace_id: ws, query: 'sixth' }, {}, five)).status).toBe(409);
    // Only ready/running workers get work.
    expect((await heartbeat(ws, 'vm-busy', { status: 'busy' })).body.assigned_run).toBeNull();

    await control(ids[0]!, { action: 'pause' });
    expect((await heartbeat(ws, 'vm-1')).body.assigned_run.run_id).toBe(ids[1]);
    // A worker that holds an undispatched run gets that run again, not a second one.
    expect((await heartbeat(ws, 'vm-1')).body.assigned_run.run_id).toBe(ids[1]);
    await dispatch(ids[1]!, 'vm-1');
    expect((await heartbeat(ws, 'vm-1', { status: 'running' })).body.assigned_run).toBeNull();

    await control(ids[0]!, { action: 'resume' });
    expect((await heartbeat(ws, 'vm-2')).body.assigned_run.run_id).toBe(ids[0]);
    expect((await heartbeat(ws, 'vm-3')).body.assigned_run.run_id).toBe(ids[2]);
    expect((await heartbeat(ws, 'vm-4', { status: 'running' })).body.assigned_run.run_id).toBe(ids[3]);
    expect((await heartbeat(ws, 'vm-5')).body.assigned_run.run_id).toBe(ids[4]);
    expect((await heartbeat(ws, 'vm-6')).body.assigned_run).toBeNull();
    // Another workspace's worker never gets these.
    expect((await heartbeat(newWs(), 'vm-1')).body.assigned_run).toBeNull();
  });
});

describe('paused runs and lost workers', () => {
  it('a paused run whose worker is lost stays paused, refuses the lost worker, and resume re-queues it', async () => {
    const gw = await stack.addGateway({ RUNS_WORKER_TTL_MS: '300' });
    const short = `http://127.0.0.1:${gw.port}`;
    const ws = newWs();
    const runId = await createRun(ws);
    const assigned = (await call('POST', '/api/runs/workers/heartbeat', { workspace_id: ws, worker_id: 'vm-1', status: 'ready' }, {}, short)).body.assigned_run;
    expect(assigned.run_id).toBe(runId);
    await dispatch(runId, 'vm-1');
    await control(runId, { action: 'pause' });
    // Any heartbeat in the workspace expires quiet workers' leases; vm-2 is never handed the paused run.
    const lost = await waitUntil('vm-1\'s lease to expire', async () => {
      expect((await heartbeat(ws, 'vm-2', { status: 'busy' })).body.assigned_run).toBeNull();
      const run = await getRun(runId);
      return run.worker === null ? run : null;
    });
    expect(lost).toMatchObject({ status: 'paused', worker: null, attempts: 1 });
    // The lost worker, when it names itself, is fenced.
    for (const body of [{ event_type: 'streaming-complete', worker_id: 'vm-1' }, { event_type: 'tool-call', worker_id: 'vm-1', lease_id: assigned.lease_id }]) {
      await expectRefused(runId, 409, () => relay(runId, body));
    }
    await expectRefused(runId, 404, () => dispatch(runId, 'vm-1'));
    expect((await control(runId, { action: 'resume' })).body.run).toMatchObject({ status: 'awaiting_worker', worker: null });
    expect((await heartbeat(ws, 'vm-2')).body.assigned_run).toMatchObject({ run_id: runId });
    expect((await allEvents(runId)).map((e) => e.event_type)).toEqual([
      'run-created', 'run-worker-assigned', 'run-dispatched', 'run-control', 'run-worker-lost', 'run-control', 'run-worker-assigned',
    ]);
  });
});

describe('controls reach the bound worker', () => {
  it('are delivered once to a legacy worker (no acked_command_ids), in order', async () => {
    const { ws, runId, worker } = await runIn('running');
    await control(runId, { action: 'pause', requested_by: 'alice' });
    await control(runId, { action: 'set-control-mode', control_mode: 'human_override', requested_by: 'alice' });
    await control(runId, { action: 'resume', requested_by: 'bob' });
    const hb = await heartbeat(ws, worker, { status: 'running' });
    expect(hb.status).toBe(200);
    expect(hb.body.heartbeat_interval_ms).toBe(100);
    // As the original, each command carries the run's control mode after it.
    expect(hb.body.control_commands.map((c: any) => [c.action, c.control_mode, c.requested_by, c.run_id])).toEqual([
      ['pause', 'agent_only', 'alice', runId],
      ['set-control-mode', 'human_override', 'alice', runId],
      ['resume', 'human_override', 'bob', runId],
    ]);
    for (const c of hb.body.control_commands) {
      expect(typeof c.command_id).toBe('string');
      expect(new Date(c.created_at).toISOString()).toBe(c.created_at);
    }
    expect(new Set(hb.body.control_commands.map((c: any) => c.command_id)).size).toBe(3);
    expect((await heartbeat(ws, worker, { status: 'running' })).body.control_commands).toEqual([]);
    expect(await getRun(runId)).toMatchObject({ status: 'running', control_mode: 'human_override' });
  });

  it('are redelivered until acked when the worker acks, so a lost heartbeat response loses no command', async () => {
    const { ws, runId, worker } = await runIn('running');
    const beat = (acked: string[]) => heartbeat(ws, worker, { status: 'running', acked_command_ids: acked });
    await control(runId, { action: 'pause' });
    const first = (await beat([])).body.control_commands;
    expect(first.map((c: any) => c.action)).toEqual(['pause']);
    // That response was lost; meanwhile another control arrives.
    await control(runId, { action: 'set-control-mode', control_mode: 'human_override' });
    const second = (await beat([])).body.control_commands;
    expect(second.map((c: any) => c.action)).toEqual(['pause', 'set-control-mode']);
    expect(second[0]).toEqual(first[0]);
    expect(second[1]).toMatchObject({ control_mode: 'human_override', run_id: runId });
    // Acking one leaves the other; acking unknown ids is harmless.
    expect((await beat([first[0].command_id, 'cmd-nope'])).body.control_commands).toEqual([second[1]]);
    expect((await beat([second[1].command_id])).body.control_commands).toEqual([]);
    expect((await beat([second[1].command_id])).body.control_commands).toEqual([]);
  });

  it('set-control-mode on an unassigned run needs no command; the worker that takes it sees the mode', async () => {
    const ws = newWs();
    const runId = await createRun(ws);
    expect((await control(runId, { action: 'set-control-mode', control_mode: 'human_override' })).body.run).toMatchObject({ status: 'awaiting_worker', control_mode: 'human_override' });
    const hb = await heartbeat(ws, 'vm-1');
    expect(hb.body.assigned_run).toMatchObject({ run_id: runId, control_mode: 'human_override' });
    expect(hb.body.control_commands).toEqual([]);
  });

  it('a pause carrying a stray control_mode does not change the mode', async () => {
    const { runId } = await runIn('running');
    const res = await control(runId, { action: 'pause', control_mode: 'human_override' });
    expect(res.status).toBe(200);
    expect(res.body.run).toMatchObject({ status: 'paused', control_mode: 'agent_only' });
  });
});

describe('run events', () => {
  it('pages with after_seq/limit/next_after_seq as the tasks API, in the original shape', async () => {
    const { runId } = await runIn('running');
    const r = await relay(runId, { events: Array.from({ length: 6 }, (_, i) => ({ event_type: 'tool-call', source: 'worker-stream', payload: { i } })) });
    expect(r.status).toBe(200);
    expect(r.body.last_seq).toBe(3 + 6);
    expect(r.body.run).toMatchObject({ status: 'running', last_event_seq: 9 });
    expect(r.body.latest_event).toMatchObject({ seq: 9, event_type: 'tool-call', payload: { i: 5 } });

    const all = await allEvents(runId);
    assertContiguous(all.map((e) => e.seq));
    expect(all.map((e) => e.event_type)).toEqual(['run-created', 'run-worker-assigned', 'run-dispatched', ...Array(6).fill('tool-call')]);
    expect(all.slice(3).map((e) => e.payload.i)).toEqual([0, 1, 2, 3, 4, 5]);
    for (const e of all) {
      expect(Object.keys(e).sort()).toEqual(['event_type', 'payload', 'seq', 'source', 'timestamp']);
      expect(new Date(e.timestamp).toISOString()).toBe(e.timestamp);
    }

    const page = await call('GET', `/api/runs/${runId}/events?after_seq=2&limit=3`);
    expect(page.body).toEqual({ run_id: runId, events: all.slice(2, 5), next_after_seq: 5 });
    expect((await call('GET', `/api/runs/${runId}/events?after_seq=5&limit=1`)).body).toEqual({ run_id: runId, events: [all[5]], next_after_seq: 6 });
    expect((await call('GET', `/api/runs/${runId}/events`)).body.events).toEqual(all); // defaults: after_seq 0, limit 200
    expect((await call('GET', `/api/runs/${runId}/events?after_seq=9&limit=1000`)).body).toEqual({ run_id: runId, events: [], next_after_seq: 9 });
    const ahead = await call('GET', `/api/runs/${runId}/events?after_seq=10`);
    expect(ahead.status).toBe(410);
    expectErrorShape(ahead);
    for (const q of ['limit=0', 'limit=1001', 'limit=-1', 'limit=abc', 'after_seq=-1', 'after_seq=x', 'limit=1.5']) {
      const res = await call('GET', `/api/runs/${runId}/events?${q}`);
      expect(res.status, q).toBe(422);
      expect(res.body.detail[0].loc[0]).toBe('query');
      expectErrorShape(res);
    }
    expect((await call('GET', `/api/runs/${runId}/events?limit=1000`)).status).toBe(200);
    expect((await call('GET', `/api/runs/${runId}/events?limit=1`)).body.events).toEqual([all[0]]);
    for (const path of ['/api/runs/nope/events', `/api/runs/${UNKNOWN}/events`, '/api/runs/nope', `/api/runs/${UNKNOWN}`, `/api/runs/${runId.toUpperCase()}`]) {
      const res = await call('GET', path);
      expect(res.status, path).toBe(404);
      expect(res.body.detail).toBe('Run not found');
    }
  });

  it('refuses malformed relays, writing nothing', async () => {
    const { runId } = await runIn('running');
    for (const body of [
      { events: [] },
      {},
      { event_type: 'tool-call', events: [{ event_type: 'tool-call' }] },
      { event_type: '' },
      { event_type: 'tool-call', extra: 1 },
      { events: [{ event_type: 'tool-call', extra: 1 }] },
    ]) {
      await expectRefused(runId, 422, () => relay(runId, body));
    }
    await expectRefused(runId, 404, () => call('POST', '/api/runs/nope/events', { event_type: 'tool-call' }));
    expect((await relay(UNKNOWN, { event_type: 'tool-call' })).status).toBe(404);
    expect((await call('POST', `/api/runs/${UNKNOWN}/worker-dispatched`, { worker_id: 'w' })).status).toBe(404);
  });

  it('completes a run with a batch ending in streaming-complete', async () => {
    const { runId } = await runIn('running');
    const r = await relay(runId, { events: [{ event_type: 'text', source: 'worker-stream', payload: { t: 'a' } }, { event_type: 'streaming-complete', source: 'worker-stream', payload: {} }] });
    expect(r.status).toBe(200);
    expect(r.body.run).toMatchObject({ status: 'completed', error: null, last_event_seq: 5 });
    expect(r.body.run.finished_at).not.toBeNull();
    expect((await allEvents(runId)).slice(3).map((e) => e.event_type)).toEqual(['text', 'streaming-complete']);
  });

  it('fails the run on a relayed error, with its message in run.error', async () => {
    const flat = await runIn('running');
    const r = await relay(flat.runId, { event_type: 'error', source: 'worker-stream', payload: { message: 'model exploded' } });
    expect(r.status).toBe(200);
    expect(r.body.run).toMatchObject({ status: 'failed', error: 'model exploded' });
    expect(await getRun(flat.runId)).toMatchObject({ status: 'failed', error: 'model exploded' });
    // The original's relay envelope: {payload: {...}, conversation_ref, turn_ref}.
    const wrapped = await runIn('running');
    const w = await relay(wrapped.runId, {
      event_type: 'error',
      source: 'worker-stream',
      payload: { payload: { message: 'tool crashed' }, conversation_ref: `run-${wrapped.runId}`, turn_ref: 'turn-1' },
    });
    expect(w.body.run).toMatchObject({ status: 'failed', error: 'tool crashed' });
    // And the cap is free again once the run has ended.
    expect((await call('POST', '/api/runs/', { workspace_id: wrapped.ws, query: 'next' })).status).toBe(200);
  });

  it('streams the same events over SSE with id = seq, resumes from Last-Event-ID, and closes after streaming-complete', async () => {
    const { runId } = await runIn('running');
    await relay(runId, { event_type: 'tool-call', source: 'worker-stream', payload: { a: 1 } });
    // The answer's headers arrive once the server has registered the stream's watcher.
    const open = (headers: Record<string, string> = {}, query = ''): Promise<Response> =>
      fetch(`${stack.url}/api/runs/${runId}/stream${query}`, { headers: { 'x-windie-runs-key': RUNS_KEY, ...headers } });
    const framesOf = async (res: Response): Promise<{ status: number; frames: { id: number; type: string; data: any }[] }> => {
      if (res.status !== 200) return { status: res.status, frames: [] };
      expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const text = await res.text(); // resolves only when the server closes the stream
      const frames = text
        .split('\n\n')
        .filter((f) => /^id: /m.test(f))
        .map((f) => ({ id: Number(/^id: (\d+)$/m.exec(f)![1]), type: /^event: (\S+)$/m.exec(f)![1]!, data: JSON.parse(/^data: (.*)$/m.exec(f)![1]!) }));
      return { status: res.status, frames };
    };
    const read = async (headers: Record<string, string> = {}, query = '') => framesOf(await open(headers, query));
    const live = await open();
    await relay(runId, { events: [{ event_type: 'tool-result', source: 'worker-stream', payload: { b: 2 } }, { event_type: 'streaming-complete', source: 'worker-stream', payload: {} }] });
    const full = await framesOf(live);
    const polled = await allEvents(runId);
    expect(full.frames.map((f) => f.data)).toEqual(polled);
    expect(full.frames.map((f) => f.id)).toEqual(polled.map((e) => e.seq));
    expect(full.frames.map((f) => f.type)).toEqual(polled.map((e) => e.event_type));
    expect(full.frames.at(-1)!.type).toBe('streaming-complete');

    expect((await read({ 'last-event-id': '3' })).frames.map((f) => f.id)).toEqual(polled.filter((e) => e.seq > 3).map((e) => e.seq));
    expect((await read({}, '?after_seq=4')).frames.map((f) => f.id)).toEqual(polled.filter((e) => e.seq > 4).map((e) => e.seq));
    // A reader that has everything of a finished run gets an empty stream that ends at once.
    expect((await read({ 'last-event-id': String(polled.length) })).frames).toEqual([]);
    expect((await read({}, `?after_seq=${polled.length + 1}`)).status).toBe(410);
    expect((await read({ 'last-event-id': 'abc' })).status).toBe(400);
    expect((await fetch(`${stack.url}/api/runs/nope/stream`, { headers: { 'x-windie-runs-key': RUNS_KEY } })).status).toBe(404);
    expect((await fetch(`${stack.url}/api/runs/${UNKNOWN}/stream`, { headers: { 'x-windie-runs-key': RUNS_KEY } })).status).toBe(404);
  });

  it('closes the SSE stream of a run that is stopped', async () => {
    const { runId } = await runIn('running');
    // Open (the headers arrive once the server watches the run), then stop: the stop reaches a live stream.
    const res = (await fetch(`${stack.url}/api/runs/${runId}/stream`, { headers: { 'x-windie-runs-key': RUNS_KEY } })).text();
    await control(runId, { action: 'stop' });
    const text = await res;
    expect(/event: run-control\n/.test(text)).toBe(true);
    // The worker's acknowledgement lands after the stop; a reader resuming at the stop gets it and the stream
    // still ends (as does one reading from the start, with everything).
    const stopSeq = (await getRun(runId)).last_event_seq;
    expect((await relay(runId, { event_type: 'run-control-applied', source: 'worker', payload: { action: 'stop' } })).status).toBe(200);
    const read = async (afterSeq: number) => {
      const body = await (await fetch(`${stack.url}/api/runs/${runId}/stream?after_seq=${afterSeq}`, { headers: { 'x-windie-runs-key': RUNS_KEY } })).text();
      return [...body.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]));
    };
    expect(await read(stopSeq)).toEqual([stopSeq + 1]);
    expect(await read(0)).toEqual(Array.from({ length: stopSeq + 1 }, (_, i) => i + 1));
    expect(await read(stopSeq + 1)).toEqual([]);
  });
});

describe('create and list', () => {
  it('answers 422 for a missing query or workspace_id and unknown fields, creating nothing', async () => {
    const ws = newWs();
    for (const body of [
      { workspace_id: ws },
      { query: 'q' },
      { workspace_id: ws, query: '' },
      { workspace_id: ws, query: 'q', surprise: 1 },
      { workspace_id: ws, query: 'q', files: [{ artifact_id: 'a', bogus: 1 }] },
      { workspace_id: 'bad workspace!', query: 'q' },
    ]) {
      const res = await call('POST', '/api/runs/', body);
      expect(res.status, JSON.stringify(body)).toBe(422);
      expectErrorShape(res);
    }
    expect((await call('GET', `/api/runs?workspace_id=${ws}`)).body.runs).toEqual([]);
  });

  it('creates runs in the original shape and caps active runs per workspace (default 1) with 409', async () => {
    const ws = newWs();
    const created = await call('POST', '/api/runs', { workspace_id: ws, agent_id: 'agent-alpha', query: 'apply', requested_by: 'user_123', files: [{ artifact_id: 'resume.pdf', filename: 'resume.pdf', content_type: 'application/pdf' }], metadata: { k: 'v' } });
    expect(created.status).toBe(200);
    const run = created.body.run;
    expect(run).toMatchObject({
      workspace_id: ws,
      agent_id: 'agent-alpha',
      query: 'apply',
      requested_by: 'user_123',
      files: [{ artifact_id: 'resume.pdf', filename: 'resume.pdf', content_type: 'application/pdf' }],
      metadata: { k: 'v' },
      status: 'awaiting_worker',
      control_mode: 'agent_only',
      conversation_ref: `run-${run.run_id}`,
      query_message_id: null,
      worker: null,
      last_heartbeat_at: null,
      last_event_seq: 1,
    });
    expect(created.body.events).toEqual([expect.objectContaining({ seq: 1, event_type: 'run-created', source: 'api' })]);
    const capped = await call('POST', '/api/runs/', { workspace_id: ws, query: 'second' });
    expect(capped.status).toBe(409);
    expectErrorShape(capped);
    expect((await call('GET', `/api/runs?workspace_id=${ws}`)).body.runs.map((r: any) => r.run_id)).toEqual([run.run_id]);
    // A paused run still counts; a stopped one does not.
    await control(run.run_id, { action: 'pause' });
    expect((await call('POST', '/api/runs/', { workspace_id: ws, query: 'third' })).status).toBe(409);
    await control(run.run_id, { action: 'stop' });
    expect((await call('POST', '/api/runs/', { workspace_id: ws, query: 'fourth' })).status).toBe(200);
    // Other workspaces have their own cap.
    expect((await call('POST', '/api/runs/', { workspace_id: newWs(), query: 'elsewhere' })).status).toBe(200);
  });

  it.each([
    [{ RUNS_MAX_ACTIVE_PER_WORKSPACE: '0' }, 1],
    [{ RUNS_MAX_ACTIVE_PER_WORKSPACE: '-3' }, 1],
    [{ RUNS_MAX_ACTIVE_PER_WORKSPACE: 'abc' }, 1],
    [{ RUNS_MAX_ACTIVE_PER_WORKSPACE: '2.5' }, 1],
    [{ WINDIE_VM_MAX_ACTIVE_RUNS_PER_WORKSPACE: '2' }, 2],
    [{ WINDIE_VM_MAX_ACTIVE_RUNS_PER_WORKSPACE: '0' }, 1],
    [{ RUNS_MAX_ACTIVE_PER_WORKSPACE: '3', WINDIE_VM_MAX_ACTIVE_RUNS_PER_WORKSPACE: '2' }, 3],
  ])('reads the cap from %o as %i', async (env, cap) => {
    const gw = await stack.addGateway(env);
    const base = `http://127.0.0.1:${gw.port}`;
    const ws = newWs();
    for (let i = 0; i < cap; i++) expect((await call('POST', '/api/runs/', { workspace_id: ws, query: `q${i}` }, {}, base)).status).toBe(200);
    expect((await call('POST', '/api/runs/', { workspace_id: ws, query: 'over' }, {}, base)).status).toBe(409);
  });

  it('returns the first run for a repeated Idempotency-Key, even at the cap', async () => {
    const ws = newWs();
    const first = await call('POST', '/api/runs/', { workspace_id: ws, query: 'once' }, { 'idempotency-key': 'k-1' });
    expect(first.status).toBe(200);
    const again = await call('POST', '/api/runs/', { workspace_id: ws, query: 'once' }, { 'idempotency-key': 'k-1' });
    expect(again.status).toBe(200);
    expect(again.body.run).toEqual(first.body.run);
    expect(again.body.events).toEqual(first.body.events);
    expect((await call('POST', '/api/runs/', { workspace_id: ws, query: 'once' }, { 'idempotency-key': 'k-2' })).status).toBe(409);
    expect((await call('GET', `/api/runs?workspace_id=${ws}`)).body.runs).toHaveLength(1);
    expect((await call('POST', '/api/runs/', { workspace_id: ws, query: 'once' }, { 'idempotency-key': 'x'.repeat(256) })).status).toBe(400);
  });

  it('lists a workspace\'s runs, newest first, filtered by status', async () => {
    const ws = newWs();
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      ids.push(await createRun(ws, { query: `q${i}` }, five));
      // The list's order is the creation time in ms: each run gets a later millisecond than the one before.
      const created = Date.now();
      await waitUntil('the next millisecond', () => Date.now() > created, { everyMs: 1 });
    }
    await heartbeat(ws, 'vm-1');
    await control(ids[2]!, { action: 'pause' });
    await control(ids[3]!, { action: 'stop' });
    const list = async (q: string) => (await call('GET', `/api/runs?${q}`)).body.runs.map((r: any) => r.run_id);
    expect(await list(`workspace_id=${ws}`)).toEqual([...ids].reverse());
    expect(await list(`workspace_id=${ws}&status=queued`)).toEqual([ids[0]]);
    expect(await list(`workspace_id=${ws}&status=awaiting_worker`)).toEqual([ids[1]]);
    expect(await list(`workspace_id=${ws}&status=paused`)).toEqual([ids[2]]);
    expect(await list(`workspace_id=${ws}&status=stopped`)).toEqual([ids[3]]);
    expect(await list(`workspace_id=${ws}&status=completed`)).toEqual([]);
    expect((await call('GET', `/api/runs?workspace_id=${ws}`)).body.runs[0]).toEqual(await getRun(ids[3]!));
    for (const q of ['', `workspace_id=${ws}&status=done`, `workspace_id=${ws}&surprise=1`]) {
      const res = await call('GET', `/api/runs?${q}`);
      expect(res.status, q).toBe(422);
      expectErrorShape(res);
    }
  });
});

describe('auth', () => {
  const routes = (runId: string): [string, string, unknown?][] => [
    ['POST', '/api/runs/', { workspace_id: 'ws-auth', query: 'q' }],
    ['POST', '/api/runs', { workspace_id: 'ws-auth', query: 'q' }],
    ['GET', '/api/runs?workspace_id=ws-auth'],
    ['GET', `/api/runs/${runId}`],
    ['GET', `/api/runs/${runId}/events?after_seq=0&limit=10`],
    ['GET', `/api/runs/${runId}/stream`],
    ['POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-auth', worker_id: 'w' }],
    ['POST', `/api/runs/${runId}/control`, { action: 'stop' }],
    ['POST', `/api/runs/${runId}/worker-dispatched`, { worker_id: 'w' }],
    ['POST', `/api/runs/${runId}/events`, { event_type: 'tool-call' }],
  ];

  it('answers 503 on every route when no runs key is configured (stop-all: no control key), as the original', async () => {
    const gw = await stack.addGateway({ RUNS_API_KEY: '', RUNS_CONTROL_API_KEY: '' });
    const stopAll: [string, string, unknown?] = ['POST', '/api/runs/stop-all', { workspace_id: 'ws-auth' }];
    for (const [method, path, body] of [...routes(UNKNOWN), stopAll]) {
      for (const headers of [{ 'x-windie-runs-key': RUNS_KEY }, {}]) {
        const res = await fetch(`http://127.0.0.1:${gw.port}${path}`, { method, headers: { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined });
        expect(res.status, `${method} ${path}`).toBe(503);
        const answer = { status: res.status, body: (await res.json()) as Record<string, any> };
        expectErrorShape(answer);
        expect(answer.body.detail).toBe(path.endsWith('stop-all') ? 'Runs control API key is not configured' : 'Runs API key is not configured');
      }
    }
  });

  it('answers 401 on every route for a missing or wrong key, changing nothing', async () => {
    const { runId } = await runIn('running');
    for (const [method, path, body] of routes(runId)) {
      const variants: Record<string, string | null>[] = [{ 'x-windie-runs-key': null }, { 'x-windie-runs-key': 'wrong' }, { 'x-windie-runs-key': '' }, { 'x-windie-runs-key': null, authorization: `Bearer ${RUNS_KEY}` }];
      for (const headers of variants) {
        const res = await expectRefused(runId, 401, () => call(method, path, body, headers));
        expect(res.body.detail).toBe('Invalid runs API key');
      }
    }
    expect((await getRun(runId)).status).toBe('running');
  });

  it.each([
    [{ RUNS_API_KEY: '', WINDIE_RUNS_API_KEY: 'windie-key' }],
    [{ RUNS_API_KEY: '', WINDIE_DEMO_API_KEY: 'windie-key' }],
    [{ RUNS_API_KEY: '  windie-key ' }],
  ])('reads the runs key from %o (the original\'s names, trimmed)', async (env) => {
    const gw = await stack.addGateway(env);
    const base = `http://127.0.0.1:${gw.port}`;
    expect((await call('GET', `/api/runs/${UNKNOWN}`, undefined, { 'x-windie-runs-key': 'windie-key' }, base)).status).toBe(404);
    expect((await call('GET', `/api/runs/${UNKNOWN}`, undefined, { 'x-windie-runs-key': ' windie-key ' }, base)).status).toBe(404);
    expect((await call('GET', `/api/runs/${UNKNOWN}`, undefined, { 'x-windie-runs-key': null }, base)).status).toBe(401);
  });

  it.each([[{}], [{ RUNS_CONTROL_API_KEY: '', WINDIE_RUNS_CONTROL_API_KEY: CONTROL_KEY }]])(
    'stop-all needs the control key alone, as the original: 403 and nothing stopped with the runs key or a wrong one (%o)',
    async (env) => {
      const gw = await stack.addGateway(env);
      const base = `http://127.0.0.1:${gw.port}`;
      const { ws, runId } = await runIn('running');
      const variants: Record<string, string | null>[] = [{}, { 'x-windie-runs-control-key': 'wrong' }, { 'x-windie-runs-control-key': RUNS_KEY }, { 'x-windie-runs-key': null }];
      for (const headers of variants) {
        for (const body of [{ workspace_id: ws }, {}]) {
          const res = await expectRefused(runId, 403, () => call('POST', '/api/runs/stop-all', body, headers, base));
          expect(res.body).toMatchObject({ detail: 'Invalid runs control API key', error: { code: 'permission_denied' } });
        }
      }
      // Other routes on that gateway need only the runs key; the control key is not one.
      expect((await call('GET', `/api/runs/${runId}`, undefined, {}, base)).status).toBe(200);
      expect((await call('GET', `/api/runs/${runId}`, undefined, { 'x-windie-runs-key': CONTROL_KEY }, base)).status).toBe(401);
      const ok = await call('POST', '/api/runs/stop-all', { workspace_id: ws, requested_by: 'ops' }, { 'x-windie-runs-key': null, 'x-windie-runs-control-key': CONTROL_KEY }, base);
      expect(ok.status).toBe(200);
      expect(ok.body).toEqual({ workspace_id: ws, stopped_run_ids: [runId], count: 1, stopped_task_ids: [] });
      expect((await getRun(runId)).status).toBe('stopped');
    },
  );
});

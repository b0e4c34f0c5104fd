import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertContiguous, runsCall, waitUntil } from '@cadre/testing';
import { TestStack } from './support/stack.ts';
import { WindieBackend, WindieVmWorker, type BackendMessage } from './support/windie-vm-worker.ts';

// Conformance: a VM worker that speaks exactly as WindieOS's (tests/support/windie-vm-worker.ts) runs unchanged
// against Cadre: its heartbeats (agent_id null) are taken, nothing it sends is refused, and every event it relays
// is in the run's log, whatever order its racing requests arrive in.

const RUNS_KEY = 'windie-worker-runs-key';
const CONTROL_KEY = 'windie-worker-control-key';
let stack: TestStack;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 0, env: { RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: CONTROL_KEY, RUNS_MAX_ACTIVE_PER_WORKSPACE: '4' } });
});
afterAll(async () => {
  await stack?.stop();
});

const call = (method: string, path: string, body?: unknown, headers: Record<string, string | null> = {}) => runsCall(stack.url, RUNS_KEY, method, path, body, headers);
const newWs = (): string => `ws-${randomUUID().slice(0, 8)}`;

async function createRun(ws: string, extra: Record<string, unknown> = {}): Promise<string> {
  const res = await call('POST', '/api/runs/', { workspace_id: ws, query: 'apply this internship job for me', ...extra });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.run.run_id;
}
const getRun = async (runId: string) => (await call('GET', `/api/runs/${runId}`)).body;
const eventsOf = async (runId: string): Promise<any[]> => (await call('GET', `/api/runs/${runId}/events?limit=1000`)).body.events;

/** The worker's heartbeat loop: ticks (each one heartbeat, as the original's interval does) until `done`. */
async function beatUntil(worker: WindieVmWorker, done: () => Promise<boolean> | boolean, what: string): Promise<void> {
  await waitUntil(`${what} while heartbeating`, async () => {
    await worker.tick();
    return done();
  }, { timeoutMs: 10_000 }).catch((err: Error) => {
    throw new Error(`${err.message} (warnings: ${JSON.stringify(worker.warnings)})`, { cause: err });
  });
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * The original's fetch hook, used to fix the order of racing requests: `hold` may delay a request until some
 * other reply arrived; `replied` hears every reply.
 */
function orderedFetch(hold: (path: string, body: any) => Promise<void> | undefined, replied: (path: string, body: any, status: number) => void): typeof fetch {
  return async (input, init) => {
    const path = new URL(String(input)).pathname;
    const body = JSON.parse(String(init?.body ?? '{}'));
    await hold(path, body);
    const res = await fetch(input, init);
    replied(path, body, res.status);
    return res;
  };
}

function worker(ws: string, backend: WindieBackend, extra: Partial<ConstructorParameters<typeof WindieVmWorker>[0]> = {}): WindieVmWorker {
  const w = new WindieVmWorker({ backendHttpUrl: stack.url, runsKey: RUNS_KEY, workspaceId: ws, userId: `user-${ws}`, backend, ...extra });
  w.start();
  return w;
}

const chunk = (conversationRef: string, n: number): BackendMessage => ({ type: 'streaming-response', conversation_ref: conversationRef, payload: { text: `chunk ${n}`, n }, turn_ref: 'msg-1' });

describe('a WindieOS VM worker against Cadre', () => {
  it('heartbeats with agent_id null, executes a run whose relays race the ack and streaming-complete, and every event is recorded', async () => {
    const ws = newWs();
    const runId = await createRun(ws, { agent_id: null, requested_by: null, files: [{ artifact_id: 'resume.pdf', filename: null, content_type: null }], metadata: {} });
    const backend = new WindieBackend();
    const completeReplied = deferred();
    const firstReplied = deferred();
    let statusBeforeAck: Record<string, any> | undefined;
    // Fixed order of the races: chunk 0 is answered before the ack is sent (an event before the dispatch ack);
    // chunk 1 and the ack are sent only after streaming-complete was answered (late arrivals).
    const fetchFn = orderedFetch(
      (path, body) => {
        if (path.endsWith('/worker-dispatched') || body.payload?.payload?.n === 1) return completeReplied.promise;
        return undefined;
      },
      (path, body) => {
        if (body.event_type === 'streaming-complete') completeReplied.resolve();
        if (body.payload?.payload?.n === 0) firstReplied.resolve();
      },
    );
    backend.onQuery = async ({ conversationRef }) => {
      backend.emit(chunk(conversationRef, 0));
      await firstReplied.promise;
      statusBeforeAck = await getRun(runId);
      for (let n = 1; n <= 5; n++) backend.emit(chunk(conversationRef, n));
      backend.emit({ type: 'tool-call', conversation_ref: conversationRef, payload: { tool: 'browser' } });
      backend.emit({ type: 'streaming-complete', conversation_ref: conversationRef, payload: { final_response: 'done' } });
      return { ok: true, queryMessageId: 'msg-1' };
    };
    const vm = worker(ws, backend, { fetchFn });

    await beatUntil(vm, () => backend.queries.length === 1, 'the run to be dispatched');
    await vm.settled();
    expect(vm.warnings).toEqual([]);

    // What the worker sent: the original's heartbeat body, agent_id null included.
    const heartbeat = vm.sent.find((r) => r.path === '/api/runs/workers/heartbeat')!.body;
    expect(heartbeat).toEqual({ workspace_id: ws, worker_id: `worker-user-${ws}`, vm_id: `vm-worker-user-${ws}`, user_id: `user-${ws}`, session_id: `user-${ws}`, agent_id: null, status: 'ready', metadata: { platform: process.platform } });
    expect(backend.queries[0]).toMatchObject({ text: 'apply this internship job for me', conversationRef: `run-${runId}`, attachmentContext: expect.stringContaining('artifact_id=resume.pdf') });
    // The event before the ack made the run running; the ack came later.
    expect(statusBeforeAck).toMatchObject({ status: 'running', query_message_id: null });

    const run = await getRun(runId);
    expect(run).toMatchObject({ status: 'completed', query_message_id: 'msg-1', agent_id: null, requested_by: null, files: [{ artifact_id: 'resume.pdf', filename: null, content_type: null }] });
    expect(run.worker).toMatchObject({ worker_id: `worker-user-${ws}`, agent_id: null, user_id: `user-${ws}` });
    const log = await eventsOf(runId);
    assertContiguous(log.map((e) => e.seq));
    const types = log.map((e) => e.event_type);
    expect(types.slice(0, 3)).toEqual(['run-created', 'run-worker-assigned', 'streaming-response']);
    // Every relayed event once, with the original's envelope; the late chunk and the ack after streaming-complete.
    const relayed = log.filter((e) => e.source === 'worker-stream');
    expect(relayed.map((e) => e.payload.payload.n ?? e.event_type).sort()).toEqual([0, 1, 2, 3, 4, 5, 'streaming-complete', 'tool-call'].sort());
    for (const e of relayed) expect(e.payload).toMatchObject({ conversation_ref: `run-${runId}`, session_id: null, user_id: null });
    const complete = types.indexOf('streaming-complete');
    expect(types.indexOf('run-dispatched')).toBeGreaterThan(complete);
    expect(log.findIndex((e) => e.payload?.payload?.n === 1)).toBeGreaterThan(complete);
    expect(log.find((e) => e.event_type === 'run-dispatched').payload).toEqual({ worker_id: `worker-user-${ws}`, user_id: `user-${ws}`, turn_ref: 'msg-1', conversation_ref: `run-${runId}` });

    // The worker is free again: its next heartbeat says ready and gets nothing.
    await vm.tick();
    expect(vm.sent.at(-1)!.body).toMatchObject({ status: 'ready', agent_id: null });
    expect(vm.warnings).toEqual([]);
    vm.stop();
  });

  it('a configured agent id travels on the heartbeat into the run\'s worker', async () => {
    const ws = newWs();
    const runId = await createRun(ws);
    const backend = new WindieBackend();
    const vm = worker(ws, backend, { agentId: 'agent-alpha', workerId: 'vm-worker-7', sessionId: 'session-9' });
    await beatUntil(vm, () => backend.queries.length === 1, 'the run to be dispatched');
    expect((await getRun(runId)).worker).toMatchObject({ worker_id: 'vm-worker-7', agent_id: 'agent-alpha', session_id: 'session-9', vm_id: 'vm-vm-worker-7' });
    expect(vm.warnings).toEqual([]);
    vm.stop();
  });

  it('acknowledges a stop after the run stopped (accepted, the rest of the tick goes on) and its late error stays out of the status', async () => {
    const ws = newWs();
    const runId = await createRun(ws);
    const second = await createRun(ws, { query: 'the next one' });
    const backend = new WindieBackend();
    backend.onQuery = async ({ conversationRef }) => {
      backend.emit(chunk(conversationRef, 0));
      return { ok: true, queryMessageId: `msg-${conversationRef}` };
    };
    const vm = worker(ws, backend);
    await beatUntil(vm, async () => (await getRun(runId)).status === 'running' && (await getRun(runId)).query_message_id !== null, 'the run to run');
    await vm.settled();

    const stopped = await call('POST', `/api/runs/${runId}/control`, { action: 'stop', requested_by: 'operator' });
    expect(stopped.body).toMatchObject({ run: { status: 'stopped' }, latest_event: { event_type: 'run-control', source: 'api' } });
    // Its next heartbeat carries the stop: the worker stops the query and acknowledges it.
    await beatUntil(vm, () => backend.stopped.length === 1, 'the stop to be applied');
    expect(vm.warnings).toEqual([]);
    // Its backend then ends the stopped query with an error, which the worker relays.
    backend.emit({ type: 'error', conversation_ref: `run-${runId}`, payload: { message: 'Query stopped by user' } });
    await vm.settled();
    expect(vm.warnings).toEqual([]);

    const run = await getRun(runId);
    expect(run).toMatchObject({ status: 'stopped', error: null });
    const log = await eventsOf(runId);
    assertContiguous(log.map((e) => e.seq));
    const [control, applied, error] = log.slice(-3);
    expect(control).toMatchObject({ event_type: 'run-control', source: 'api', payload: { action: 'stop', status: 'stopped', requested_by: 'operator', control_mode: 'agent_only' } });
    expect(applied).toMatchObject({ event_type: 'run-control-applied', source: 'worker', payload: { action: 'stop', command_id: control.payload.command_id, conversation_ref: `run-${runId}` } });
    expect(error).toMatchObject({ event_type: 'error', source: 'worker-stream', payload: { payload: { message: 'Query stopped by user' } } });
    // The tick that applied the stop went on, and the worker, free again, takes the next run.
    await beatUntil(vm, () => backend.queries.length === 2, 'the next run to be dispatched');
    expect(backend.queries[1]!.conversationRef).toBe(`run-${second}`);
    expect(vm.warnings).toEqual([]);
    vm.stop();
  });

  it('acknowledges stop-all on every worker; the acks are recorded after the bulk stop', async () => {
    const workspaces = [newWs(), newWs()];
    const runs: string[] = [];
    const vms: { vm: WindieVmWorker; backend: WindieBackend }[] = [];
    for (const ws of workspaces) {
      runs.push(await createRun(ws));
      const backend = new WindieBackend();
      vms.push({ vm: worker(ws, backend), backend });
    }
    for (const { vm, backend } of vms) await beatUntil(vm, () => backend.queries.length === 1, 'the run to be dispatched');

    const all = await call('POST', '/api/runs/stop-all', { requested_by: 'operator' }, { 'x-windie-runs-key': null, 'x-windie-runs-control-key': CONTROL_KEY });
    expect(all.status).toBe(200);
    expect(all.body.stopped_run_ids).toEqual(expect.arrayContaining(runs));
    for (const { vm, backend } of vms) {
      await beatUntil(vm, () => backend.stopped.length === 1, 'the stop to be applied');
      expect(vm.warnings).toEqual([]);
    }
    for (const runId of runs) {
      const log = await eventsOf(runId);
      const [control, applied] = log.slice(-2);
      expect(control).toMatchObject({ event_type: 'run-control', source: 'api', payload: { action: 'stop', bulk: true, requested_by: 'operator' } });
      expect(applied).toMatchObject({ event_type: 'run-control-applied', source: 'worker', payload: { action: 'stop', command_id: control.payload.command_id } });
      expect((await getRun(runId)).status).toBe('stopped');
    }
    for (const { vm } of vms) vm.stop();
  });

  it('a dispatch failure it reports fails the run, which is not offered again', async () => {
    const ws = newWs();
    const runId = await createRun(ws);
    const backend = new WindieBackend();
    backend.onQuery = async () => ({ ok: false, error: 'backend is not connected' });
    const vm = worker(ws, backend);
    await beatUntil(vm, async () => (await getRun(runId)).status === 'failed', 'the run to fail');
    expect(vm.warnings).toEqual([]);
    expect(await getRun(runId)).toMatchObject({ status: 'failed', error: 'backend is not connected', query_message_id: null });
    expect((await eventsOf(runId)).at(-1)).toMatchObject({ event_type: 'error', source: 'worker', payload: { message: 'backend is not connected' } });
    // Later heartbeats get no run: the failed one is not offered again.
    for (let i = 0; i < 3; i++) await vm.tick();
    expect(backend.queries).toHaveLength(1);
    expect(vm.sent.filter((r) => r.path === '/api/runs/workers/heartbeat').every((r) => r.body.status === 'ready')).toBe(true);
    vm.stop();
  });
});

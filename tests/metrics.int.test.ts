import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { TEST_API_KEY, grpcClient, httpClient, pollUntilTerminal, runsCall, waitUntil, watchTeam } from '@cadre/testing';
import { createTaskNeedingApprovals } from './support/approvals.ts';
import { Scrape } from './support/prometheus.ts';
import { SessionStream } from './support/session-client.ts';
import { TestStack, freePort } from './support/stack.ts';

// Every process kind serves /metrics (the worker and the vm-agent on ports of their own); a task and a run move
// the numbers operators watch, no label carries an id, and the Grafana dashboard asks only for names that exist.
const RUNS_KEY = 'metrics-runs-key';
const CONTROL_KEY = 'metrics-control-key';
let stack: TestStack;
let workerMetrics: string;
let vmMetrics: string;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 0, env: { RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: CONTROL_KEY, RUNS_HEARTBEAT_INTERVAL_MS: '100', RUNS_WORKER_TTL_MS: '1000' } });
  const [wPort, vPort] = [await freePort(), await freePort()];
  await stack.spawnWorkerProcess({ WORKER_METRICS_PORT: String(wPort), WORKER_METRICS_HOST: '127.0.0.1' });
  await stack.spawnVmAgent('metrics', 'vm-m', { VM_AGENT_METRICS_PORT: String(vPort) });
  workerMetrics = `http://127.0.0.1:${wPort}/metrics`;
  vmMetrics = `http://127.0.0.1:${vPort}/metrics`;
});
afterAll(async () => {
  await stack?.stop();
});

const scrapeAll = async () => ({
  gateway: await Scrape.of(`${stack.url}/metrics`),
  worker: await Scrape.of(workerMetrics),
  vm: await Scrape.of(vmMetrics),
});

describe('metrics', () => {
  let before: Awaited<ReturnType<typeof scrapeAll>>;
  let after: Awaited<ReturnType<typeof scrapeAll>>;
  let ids: string[];

  it('move on every process after a team task (watched live over gRPC) and a VM run', async () => {
    before = await scrapeAll();

    const created = await httpClient(stack.url).post<{ task: { task_id: string } }>('/api/tasks', {
      workspace_id: 'metrics',
      goal: 'Add up [[scripted:delay=300]]',
      team: { workers: [{ role: 'adder', instructions: 'Add. [[scripted:call=calculate({"expression":"2+2"})]]', tools: ['calculate'] }] },
    });
    expect(created.status).toBe(201);
    const taskId = created.body.task.task_id;
    const client = grpcClient(stack.grpcTarget);
    const watched = await watchTeam(client, { taskId });
    client.close();
    expect(watched.events.at(-1)!.event!.$case).toBe('taskStatusChanged');
    await pollUntilTerminal(stack.url, taskId);

    const run = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: 'metrics', query: 'Say hi [[scripted:call=shell({"command":"echo hi"})]]' });
    const runId = run.body.run.run_id as string;
    await waitUntil('the run to complete', async () => (await runsCall(stack.url, RUNS_KEY, 'GET', `/api/runs/${runId}`)).body.status === 'completed');
    ids = [taskId, runId];

    // The lead's last write and the run's end are recorded before the worker and agent count them: wait for those.
    await waitUntil('the worker and vm-agent to count their work', async () => {
      const s = await scrapeAll();
      return s.worker.value('cadre_task_duration_seconds_count', { status: 'completed' }) > before.worker.value('cadre_task_duration_seconds_count', { status: 'completed' })
        && s.vm.value('cadre_vm_runs_total', { outcome: 'completed' }) > before.vm.value('cadre_vm_runs_total', { outcome: 'completed' });
    });
    after = await scrapeAll();
    const moved = (proc: keyof typeof after, name: string, labels: Record<string, string> = {}) => after[proc].value(name, labels) - before[proc].value(name, labels);

    // Gateway: requests per route template and gRPC method, task and run counts, events, fan-out, heartbeats.
    expect(moved('gateway', 'cadre_http_requests_total', { method: 'POST', route: '/api/tasks', status_code: '201' })).toBe(1);
    expect(moved('gateway', 'cadre_http_request_duration_seconds_count', { method: 'POST', route: '/api/tasks' })).toBe(1);
    expect(moved('gateway', 'cadre_grpc_server_handled_total', { grpc_method: 'roz.v1.AgentService/WatchTeam', grpc_code: 'OK' })).toBe(1);
    expect(moved('gateway', 'cadre_tasks_reached_status', { status: 'completed' })).toBe(1);
    // Only the watched task's shard channel was heard: some of its appends (those after the watch began), no more.
    expect(moved('gateway', 'cadre_fanout_notifications_total')).toBeGreaterThan(0);
    expect(moved('gateway', 'cadre_fanout_notifications_total')).toBeLessThanOrEqual(watched.events.length);
    // At most one lag observation per event for the one watched log (the tail's, after its caught-up watchers).
    expect(moved('gateway', 'cadre_fanout_lag_seconds_count')).toBeGreaterThan(0);
    expect(moved('gateway', 'cadre_fanout_lag_seconds_count')).toBeLessThanOrEqual(watched.events.length);
    // Live appends came with their entries: the watched task's tail took some without a read.
    expect(moved('gateway', 'cadre_fanout_entries_carried_total')).toBeGreaterThan(0);
    expect(moved('gateway', 'cadre_run_heartbeats_total')).toBeGreaterThan(0);
    expect(after.gateway.value('cadre_queue_jobs', { queue: 'agents', state: 'active' })).toBe(0);
    expect(after.gateway.names()).toContain('cadre_runs');

    // Events appended, counted by the process whose script wrote them: the task's log by the gateway (task_queued)
    // and the worker (the rest), the run's by the gateway alone (creation, dispatch, the agent's relays). Summed over
    // processes, exactly the logs' lengths.
    const taskLength = (await httpClient(stack.url).get<{ task: { last_seq: number } }>(`/api/tasks/${taskId}`)).body.task.last_seq;
    const runLength = (await runsCall(stack.url, RUNS_KEY, 'GET', `/api/runs/${runId}/events?limit=1000`)).body.events.length as number;
    expect(moved('gateway', 'cadre_events_appended_total', { log: 'task' })).toBe(1);
    expect(moved('worker', 'cadre_events_appended_total', { log: 'task' })).toBe(taskLength - 1);
    expect(moved('gateway', 'cadre_events_appended_total', { log: 'run' })).toBe(runLength);
    expect(moved('worker', 'cadre_events_appended_total', { log: 'run' })).toBe(0);

    // Worker: model calls, tokens and latency per model, turns, tools, task duration.
    expect(moved('worker', 'cadre_model_requests_total', { model: 'cadre-scripted', outcome: 'ok' })).toBe(3);
    expect(moved('worker', 'cadre_model_request_duration_seconds_count', { model: 'cadre-scripted' })).toBe(3);
    expect(moved('worker', 'cadre_model_tokens_total', { model: 'cadre-scripted', type: 'input' })).toBeGreaterThan(0);
    expect(moved('worker', 'cadre_model_tokens_total', { model: 'cadre-scripted', type: 'output' })).toBeGreaterThan(0);
    expect(moved('worker', 'cadre_agent_turn_duration_seconds_count')).toBe(3);
    expect(moved('worker', 'cadre_tool_calls_total', { tool: 'calculate', outcome: 'ok' })).toBe(1);
    expect(moved('worker', 'cadre_task_duration_seconds_count', { status: 'completed' })).toBe(1);
    expect(moved('worker', 'cadre_agent_job_seconds_count', { outcome: 'completed' })).toBe(2);

    // VM agent: its heartbeats, dispatch and relays, its run, its model and tool calls.
    expect(moved('vm', 'cadre_vm_gateway_requests_total', { operation: 'heartbeat', outcome: 'ok' })).toBeGreaterThan(0);
    expect(moved('vm', 'cadre_vm_gateway_requests_total', { operation: 'dispatch', outcome: 'ok' })).toBe(1);
    expect(moved('vm', 'cadre_vm_gateway_requests_total', { operation: 'relay', outcome: 'ok' })).toBeGreaterThan(0);
    expect(moved('vm', 'cadre_vm_runs_total', { outcome: 'completed' })).toBe(1);
    expect(moved('vm', 'cadre_model_requests_total', { model: 'cadre-scripted', outcome: 'ok' })).toBe(2);
    expect(moved('vm', 'cadre_tool_calls_total', { tool: 'shell', outcome: 'ok' })).toBe(1);
  });

  it('count a session turn (a client tool round trip): its model calls like a team agent\'s, the parked turn and its wait, its outcome and duration', async () => {
    const api = httpClient(stack.url);
    const start = await Scrape.of(workerMetrics);
    const gatewayStart = await Scrape.of(`${stack.url}/metrics`);
    const created = await api.post<{ session: { session_id: string } }>('/api/sessions', {
      workspace_id: 'metrics',
      tools: [{ name: 'get_location', description: 'Where the user is', parameters: { type: 'object', properties: {} } }],
    });
    expect(created.status).toBe(201);
    const id = created.body.session.session_id;
    const eventsUntil = async (type: string) => {
      let found: { event_type: string; payload: Record<string, any> } | undefined;
      await waitUntil(`a ${type} event`, async () => {
        const { body } = await api.get<{ events: { event_type: string; payload: Record<string, any> }[] }>(`/api/sessions/${id}/events?limit=1000`);
        found = body.events.find((e) => e.event_type === type);
        return found !== undefined;
      });
      return found!;
    };
    expect((await api.post(`/api/sessions/${id}/messages`, { content: 'Where am I? [[scripted:call=get_location({})]]' })).status).toBe(202);
    const request = await eventsUntil('tool_request');
    // Parked on the client's answer: the gateway counts it from Redis (the worker slot is free).
    await waitUntil('the parked turn to show', async () => (await Scrape.of(`${stack.url}/metrics`)).value('cadre_sessions_parked') === 1);
    expect((await api.post(`/api/sessions/${id}/tool-results`, { tool_call_id: request.payload.tool_call_id, success: true, result: 'Oslo' })).status).toBe(200);
    const done = await eventsUntil('turn_complete');
    expect(done.payload.stop_reason).toBe('end_turn');
    expect((await Scrape.of(`${stack.url}/metrics`)).value('cadre_sessions_parked')).toBe(0);

    // The call is counted before its answer is committed, so the turn_complete event means both are in; the turn's
    // end is counted once its commit returns, just after the event is visible (a CI run scraped in between).
    let end = await Scrape.of(workerMetrics);
    await waitUntil('the turn\'s end to be counted', async () => {
      end = await Scrape.of(workerMetrics);
      return end.value('cadre_session_turns_total', { outcome: 'end_turn' }) > start.value('cadre_session_turns_total', { outcome: 'end_turn' });
    });
    const moved = (name: string, labels: Record<string, string> = {}) => end.value(name, labels) - start.value(name, labels);
    expect(moved('cadre_model_requests_total', { model: 'cadre-scripted', outcome: 'ok' })).toBe(2);
    expect(moved('cadre_model_request_duration_seconds_count', { model: 'cadre-scripted' })).toBe(2);
    expect(moved('cadre_model_tokens_total', { model: 'cadre-scripted', type: 'input' })).toBeGreaterThan(0);
    expect(moved('cadre_model_tokens_total', { model: 'cadre-scripted', type: 'output' })).toBeGreaterThan(0);
    // One turn, ended by the loop (end_turn), parked once; the gateway ended none.
    expect(moved('cadre_session_turns_total', { outcome: 'end_turn' })).toBe(1);
    expect(moved('cadre_session_turn_duration_seconds_count')).toBe(1);
    expect(moved('cadre_session_park_duration_seconds_count')).toBe(1);
    expect(end.text).not.toContain(id);

    // The session's log: the client's message and tool result appended by the gateway, the turn's events by the
    // worker; together, exactly its length. (The worker counts a script's appends when its reply arrives, which may
    // be just after a reader saw them: wait for the count to reach the length, then check it did not pass it.)
    const length = (await api.get<{ session: { last_seq: number } }>(`/api/sessions/${id}`)).body.session.last_seq;
    const appendedSince = async (scrape: Scrape, url: string) => (await Scrape.of(url)).value('cadre_events_appended_total', { log: 'session' }) - scrape.value('cadre_events_appended_total', { log: 'session' });
    const byProcess = async () => [await appendedSince(gatewayStart, `${stack.url}/metrics`), await appendedSince(start, workerMetrics)] as const;
    await waitUntil('the session\'s appends to be counted', async () => (await byProcess()).reduce((a, b) => a + b) >= length);
    const [byGateway, byWorker] = await byProcess();
    expect(byGateway).toBeGreaterThan(0);
    expect(byWorker).toBeGreaterThan(0);
    expect(byGateway + byWorker).toBe(length);

    // A turn a client cancels or aborts ends on the gateway, which counts it with its duration; so does a turn the
    // session's close cuts short (their turn_complete says `cancelled`).
    const onGateway = async () => {
      const scrape = await Scrape.of(`${stack.url}/metrics`);
      const since = (name: string, labels: Record<string, string> = {}) => scrape.value(name, labels) - gatewayStart.value(name, labels);
      return { cancelled: since('cadre_session_turns_total', { outcome: 'cancelled' }), timed: since('cadre_session_turn_duration_seconds_count') };
    };
    const slowTurn = async () => expect((await api.post(`/api/sessions/${id}/messages`, { content: 'Take your time [[scripted:delay=30000]]' })).status).toBe(202);
    await slowTurn();
    expect((await api.post(`/api/sessions/${id}/cancel`, { reason: 'enough' })).status).toBe(200);
    expect(await onGateway()).toEqual({ cancelled: 1, timed: 1 });
    await slowTurn();
    expect((await api.post<{ aborted: boolean }>(`/api/sessions/${id}/abort`, {})).body.aborted).toBe(true);
    expect(await onGateway()).toEqual({ cancelled: 2, timed: 2 });
    await slowTurn();
    expect((await api.request('DELETE', `/api/sessions/${id}`, { reason: 'done' })).status).toBe(200);
    expect((await eventsUntil('session_closed')).payload.reason).toBe('done');
    expect(await onGateway()).toEqual({ cancelled: 3, timed: 3 });
  });

  it('count open session connections by protocol: roz StreamSession, WindieOS /ws, a session\'s SSE stream', async () => {
    const url = `${stack.url}/metrics`;
    const open = async (protocol: string) => (await Scrape.of(url)).value('cadre_sessions_open', { protocol });
    const created = await httpClient(stack.url).post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'metrics' });
    const sse = new AbortController();
    const follow = await fetch(`${stack.url}/api/sessions/${created.body.session.session_id}/stream`, { headers: { authorization: `Bearer ${TEST_API_KEY}` }, signal: sse.signal });
    expect(follow.status).toBe(200);
    const client = grpcClient(stack.grpcTarget);
    const roz = new SessionStream(client);
    const ws = new WebSocket(`${stack.url.replace('http', 'ws')}/ws`, { headers: { authorization: `Bearer ${TEST_API_KEY}` } });
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    await waitUntil('each connection to count', async () => (await open('sse')) === 1 && (await open('roz')) === 1 && (await open('ws')) === 1);
    expect(await open('kontekst')).toBe(0);

    sse.abort();
    roz.cancel();
    ws.close();
    await waitUntil('each close to count', async () => (await open('sse')) === 0 && (await open('roz')) === 0 && (await open('ws')) === 0);
    client.close();
  });

  it('count approvals pending by owner kind (cluster-wide, from Redis) and each decision once with its wait', async () => {
    const WS = 'metrics-appr';
    const api = httpClient(stack.url);
    const gateway = () => Scrape.of(`${stack.url}/metrics`);
    const start = { gateway: await gateway(), worker: await Scrape.of(workerMetrics) };
    await stack.spawnVmAgent(WS, 'vm-appr');
    expect((await api.request('PUT', `/api/workspaces/${WS}/approval-policy`, { rules: [{ tool: 'shell', action: 'ask', reason: 'a shell on the VM' }] })).status).toBe(200);
    const pendingIn = (filter: string, count = 1) => waitUntil(`${count} pending approval(s) of ${filter}`, async () => {
      const found = (await api.get<{ approvals: { approval_id: string }[] }>(`/api/approvals?workspace_id=${WS}&${filter}&status=pending`)).body.approvals;
      return found.length === count && found.map((a) => a.approval_id);
    });
    const askingSession = async (timeoutSecs: number) => {
      const created = await api.post<{ session: { session_id: string } }>('/api/sessions', {
        workspace_id: WS, approval_policy: { rules: [{ tool: 'calculate', action: 'ask', reason: 'check the maths', timeout_secs: timeoutSecs }] },
      });
      const id = created.body.session.session_id;
      expect((await api.post(`/api/sessions/${id}/messages`, { content: 'Add [[scripted:call=calculate({"expression":"1+1"})]]' })).status).toBe(202);
      return id;
    };

    // Two team workers, one session turn and one VM run each wait on a decision.
    const taskIds = [await createTaskNeedingApprovals(stack.url, WS, ['left', 'right'])];
    const sessionId = await askingSession(600);
    const run = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: WS, query: 'Echo [[scripted:call=shell({"command":"echo x"})]]' });
    const runId = run.body.run.run_id as string;
    const taskAsks = await pendingIn(`task_id=${taskIds[0]}`, 2);
    const [sessionAsk] = await pendingIn(`session_id=${sessionId}`);
    const [runAsk] = await pendingIn(`run_id=${runId}`);
    const pending = await gateway();
    expect(pending.value('cadre_approvals_pending', { kind: 'task' })).toBe(2);
    expect(pending.value('cadre_approvals_pending', { kind: 'session' })).toBe(1);
    expect(pending.value('cadre_approvals_pending', { kind: 'run' })).toBe(1);

    // Decided over HTTP: three approved, one denied; a second decision (409) is not counted again.
    const decide = (id: string, approved: boolean) => api.post(`/api/approvals/${id}/decision`, { approved });
    for (const id of [taskAsks[0]!, sessionAsk!, runAsk!]) expect((await decide(id, true)).status).toBe(200);
    expect((await decide(taskAsks[1]!, false)).status).toBe(200);
    expect((await decide(taskAsks[1]!, true)).status).toBe(409);
    // A cancelled task cancels its worker's approval; a session's approval past its deadline expires on the worker.
    taskIds.push(await createTaskNeedingApprovals(stack.url, WS, ['doomed']));
    await pendingIn(`task_id=${taskIds[1]}`);
    expect((await api.post(`/api/tasks/${taskIds[1]}/cancel`, {})).status).toBe(200);
    const expiring = await askingSession(1);
    await waitUntil('the worker to expire the session\'s approval', async () => (await Scrape.of(workerMetrics)).value('cadre_approval_decisions_total', { outcome: 'expired' }) > start.worker.value('cadre_approval_decisions_total', { outcome: 'expired' }));

    const end = { gateway: await gateway(), worker: await Scrape.of(workerMetrics) };
    const moved = (proc: 'gateway' | 'worker', name: string, labels: Record<string, string>) => end[proc].value(name, labels) - start[proc].value(name, labels);
    for (const kind of ['task', 'session', 'run']) expect(end.gateway.value('cadre_approvals_pending', { kind })).toBe(0);
    expect(moved('gateway', 'cadre_approval_decisions_total', { outcome: 'approved' })).toBe(3);
    expect(moved('gateway', 'cadre_approval_decisions_total', { outcome: 'denied' })).toBe(1);
    expect(moved('gateway', 'cadre_approval_decisions_total', { outcome: 'cancelled' })).toBe(1);
    expect(moved('worker', 'cadre_approval_decisions_total', { outcome: 'expired' })).toBe(1);
    expect(moved('gateway', 'cadre_approval_wait_seconds_count', { outcome: 'approved' })).toBe(3);
    expect(moved('worker', 'cadre_approval_wait_seconds_count', { outcome: 'expired' })).toBe(1);
    // The approved calls ran on the worker: the task worker's and the session's (a session's builtin tools count too).
    const calculated = async () => (await Scrape.of(workerMetrics)).value('cadre_tool_calls_total', { tool: 'calculate', outcome: 'ok' }) - start.worker.value('cadre_tool_calls_total', { tool: 'calculate', outcome: 'ok' });
    await waitUntil('both approved calls to run', async () => (await calculated()) >= 2);
    expect(await calculated()).toBe(2);
    // The expired approval waited (at least) its whole second.
    expect(moved('worker', 'cadre_approval_wait_seconds_sum', { outcome: 'expired' })).toBeGreaterThanOrEqual(1);
    for (const id of [...taskIds, sessionId, expiring, runId]) expect(end.gateway.text + end.worker.text).not.toContain(id);
  });

  it('count a VM run\'s approvals cancelled with it: by its stop, by stop-all, by its VM\'s lost lease', async () => {
    const WS = 'metrics-run-appr';
    const api = httpClient(stack.url);
    const vm = await stack.spawnVmAgent(WS, 'vm-run-appr');
    expect((await api.request('PUT', `/api/workspaces/${WS}/approval-policy`, { rules: [{ tool: 'shell', action: 'ask', reason: 'a shell on the VM' }] })).status).toBe(200);
    const start = await Scrape.of(`${stack.url}/metrics`);
    const runWaitingOnApproval = async () => {
      const run = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: WS, query: 'Echo [[scripted:call=shell({"command":"echo x"})]]' });
      const runId = run.body.run.run_id as string;
      await waitUntil('the run\'s approval to be pending', async () => (await api.get<{ approvals: unknown[] }>(`/api/approvals?workspace_id=${WS}&run_id=${runId}&status=pending`)).body.approvals.length === 1);
      return runId;
    };
    const runStatus = async (runId: string) => (await runsCall(stack.url, RUNS_KEY, 'GET', `/api/runs/${runId}`)).body.status as string;

    const stopped = await runWaitingOnApproval();
    expect((await runsCall(stack.url, RUNS_KEY, 'POST', `/api/runs/${stopped}/control`, { action: 'stop' })).status).toBe(200);
    const stoppedByAll = await runWaitingOnApproval();
    const all = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/stop-all', { workspace_id: WS }, { 'x-windie-runs-key': null, 'x-windie-runs-control-key': CONTROL_KEY });
    expect(all.body.stopped_run_ids).toEqual([stoppedByAll]);
    // The VM dies while its run waits: the lease sweeper (or a heartbeat) expires the lease and voids the question.
    const lost = await runWaitingOnApproval();
    vm.kill('SIGKILL');
    await waitUntil('the dead VM\'s lease to expire', async () => (await runStatus(lost)) === 'awaiting_worker');

    const end = await Scrape.of(`${stack.url}/metrics`);
    // Stopped before the checks, so a miss leaves no run behind for the next test (its approval is no longer pending).
    expect((await runsCall(stack.url, RUNS_KEY, 'POST', `/api/runs/${lost}/control`, { action: 'stop' })).status).toBe(200);
    const moved = (name: string, labels: Record<string, string>) => end.value(name, labels) - start.value(name, labels);
    expect(moved('cadre_approval_decisions_total', { outcome: 'cancelled' })).toBe(3);
    expect(moved('cadre_approval_wait_seconds_count', { outcome: 'cancelled' })).toBe(3);
    expect(end.value('cadre_approvals_pending', { kind: 'run' })).toBe(0);
  });

  it('never carry a task or run id in a label', () => {
    for (const scrape of Object.values(after)) {
      for (const id of ids) expect(scrape.text).not.toContain(id);
      for (const sample of scrape.samples) {
        for (const value of Object.values(sample.labels)) expect(value).not.toMatch(/[0-9a-f]{8}-[0-9a-f]{4}-/);
      }
    }
  });

  it('count lease expiries and requeues when a VM agent dies mid-run', async () => {
    const doomed = await stack.spawnVmAgent('metrics-lease', 'vm-doomed');
    const run = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: 'metrics-lease', query: 'Slow [[scripted:call=shell({"command":"sleep 30"})]]' });
    const runId = run.body.run.run_id as string;
    await waitUntil('the run to start', async () => (await runsCall(stack.url, RUNS_KEY, 'GET', `/api/runs/${runId}`)).body.status === 'running');
    const start = await Scrape.of(`${stack.url}/metrics`);
    doomed.kill('SIGKILL');
    await waitUntil('the lease to expire and the run to be requeued', async () => (await runsCall(stack.url, RUNS_KEY, 'GET', `/api/runs/${runId}`)).body.status === 'awaiting_worker');
    const end = await Scrape.of(`${stack.url}/metrics`);
    expect(end.value('cadre_run_lease_expiries_total') - start.value('cadre_run_lease_expiries_total')).toBe(1);
    expect(end.value('cadre_run_requeues_total') - start.value('cadre_run_requeues_total')).toBe(1);
    expect(end.value('cadre_runs', { status: 'awaiting_worker' })).toBe(1);
    await runsCall(stack.url, RUNS_KEY, 'POST', `/api/runs/${runId}/control`, { action: 'stop' });
  });

  it('back every expression of the Grafana dashboard with names a scrape exposes', () => {
    const dashboard = JSON.parse(readFileSync(new URL('../deploy/grafana/cadre-dashboard.json', import.meta.url), 'utf8')) as { panels: { targets?: { expr: string }[] }[] };
    const exposed = new Set([...after.gateway.names(), ...after.worker.names(), ...after.vm.names()]);
    const exprs = dashboard.panels.flatMap((p) => p.targets ?? []).map((t) => t.expr);
    expect(exprs.length).toBeGreaterThan(20);
    const missing: string[] = [];
    for (const expr of exprs) {
      const names = expr.match(/\b(?:cadre|process|nodejs)_[a-z0-9_]+/g) ?? [];
      expect(names.length, expr).toBeGreaterThan(0);
      for (const name of names) if (!exposed.has(name)) missing.push(name);
    }
    expect(missing).toEqual([]);
  });
});

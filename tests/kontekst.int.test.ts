import * as grpc from '@grpc/grpc-js';
import type { ChildProcess } from 'node:child_process';
import * as http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_API_KEY, httpClient, waitUntil } from '@cadre/testing';
import { kontekst } from '@cadre/protocol';
import { KontekstRun } from './support/kontekst-run.ts';
import { TestStack } from './support/stack.ts';

// kontekst's AgentService/Run and DaemonService on the gateway's one port, driven by a real grpc-js client as
// kontekst's CLI drives its daemon: start, then ApproveTool/DenyTool per proposed call_id, or CancelRun.
const CONTROL_KEY = 'control-key-kontekst-0123456789';
let stack: TestStack;
let worker: ChildProcess | undefined;

beforeAll(async () => {
  stack = await TestStack.start({ gateways: 1, workers: 0, env: { RUNS_CONTROL_API_KEY: CONTROL_KEY } });
  worker = await stack.spawnWorkerProcess();
});
afterAll(async () => {
  await stack?.stop();
});

/** A Run on the stack's first gateway unless told another. */
class Run extends KontekstRun {
  constructor(target = `127.0.0.1:${stack.gateways[0]!.port}`) {
    super(target);
  }
}

const CALC = (expr: string) => `[[scripted:call=calculate({"expression":"${expr}"})]]`;

describe('kontekst AgentService.Run', () => {
  it('propose → approve → complete: the calls of one answer come in one ToolsProposed, in the model\'s order', async () => {
    const run = new Run();
    run.send({ $case: 'start', value: { prompt: `Two sums [[scripted:parallel]] ${CALC('1+1')} ${CALC('2+3')}`, sessionId: '', agentName: '', workingDir: '' } });
    const started = await run.waitFor('started');
    expect(started.agentName).toBe('default');
    const proposed = await run.waitFor('toolsProposed');
    expect(proposed.calls.map((c) => [c.name, c.argumentsJson])).toEqual([['calculate', '{"expression":"1+1"}'], ['calculate', '{"expression":"2+3"}']]);
    // The session behind the run is parked: nothing ran before the decisions.
    expect(run.cases()).toEqual(['started', 'turnCompleted', 'contextSnapshot', 'toolsProposed']);
    // Decided out of order: the turn goes on only after both.
    run.send({ $case: 'approveTool', value: { callId: proposed.calls[1]!.callId } });
    run.send({ $case: 'approveTool', value: { callId: proposed.calls[0]!.callId } });
    const completed = await run.waitFor('completed');
    expect((await run.status).code).toBe(grpc.status.OK);
    expect(completed.runId).toBe(started.runId);
    expect(completed.content).toContain('using 2 tool result(s): 2; 5');
    const cases = run.cases();
    expect(cases.slice(4, 9)).toEqual(['toolStarted', 'toolStarted', 'toolCompleted', 'toolCompleted', 'toolsCompleted']);
    expect(run.of('toolCompleted').map((t) => [t.callId, t.output])).toEqual([[proposed.calls[0]!.callId, '2'], [proposed.calls[1]!.callId, '5']]);
    expect(cases.slice(-3)).toEqual(['turnCompleted', 'contextSnapshot', 'completed']);
    expect(run.of('token').map((t) => t.text).join('')).toBe(completed.content);
    const snapshot = run.of('contextSnapshot').at(-1)!.context!;
    expect(snapshot.contextSize).toBe(200_000);
    expect(snapshot.totalTokens).toBeGreaterThan(0);
    expect(snapshot.remainingTokens).toBe(snapshot.contextSize - snapshot.totalTokens);
    run.close();
  });

  it('propose → deny → cancelled: the model does not get past a denial', async () => {
    const modelCalls = stack.model.requestCount();
    const run = new Run();
    run.send({ $case: 'start', value: { prompt: `Sum ${CALC('1+1')}`, sessionId: '', agentName: 'coder', workingDir: '' } });
    const started = await run.waitFor('started');
    const proposed = await run.waitFor('toolsProposed');
    run.send({ $case: 'denyTool', value: { callId: proposed.calls[0]!.callId, reason: 'not now' } });
    const cancelled = await run.waitFor('cancelled');
    expect((await run.status).code).toBe(grpc.status.OK);
    expect(cancelled.runId).toBe(started.runId);
    expect(run.of('toolFailed')).toEqual([{ callId: proposed.calls[0]!.callId, error: 'denied: not now' }]);
    expect(run.cases().slice(-3)).toEqual(['toolFailed', 'toolsCompleted', 'cancelled']);
    expect(stack.model.requestCount() - modelCalls).toBe(1);
    // The session keeps the denial for a later run; its turn ended with stop_reason denied.
    const log = await httpClient(stack.url).get<{ events: { event_type: string; payload: Record<string, unknown> }[] }>(`/api/sessions/${started.sessionId}/events?limit=1000`);
    expect(log.body.events.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['denied']);
    run.close();
  });

  it('CancelRunCommand while calls are proposed cancels them and the run', async () => {
    const run = new Run();
    run.send({ $case: 'start', value: { prompt: `Sum ${CALC('3+3')}`, sessionId: '', agentName: '', workingDir: '' } });
    const started = await run.waitFor('started');
    await run.waitFor('toolsProposed');
    run.send({ $case: 'cancel', value: {} });
    await run.waitFor('cancelled');
    expect((await run.status).code).toBe(grpc.status.OK);
    const approvals = await httpClient(stack.url).get<{ approvals: { status: string }[] }>(`/api/approvals?workspace_id=default&session_id=${started.sessionId}`);
    expect(approvals.body.approvals.map((a) => a.status)).toEqual(['cancelled']);
    run.close();
  });

  it('kill -9 of the worker while a proposal waits changes nothing: another worker runs the approved tool', async () => {
    const run = new Run();
    run.send({ $case: 'start', value: { prompt: `Sum ${CALC('20+22')}`, sessionId: '', agentName: '', workingDir: '' } });
    const proposed = await run.waitFor('toolsProposed');
    worker!.kill('SIGKILL');
    await new Promise<void>((resolve) => (worker!.exitCode !== null || worker!.signalCode !== null ? resolve() : worker!.once('exit', () => resolve())));
    worker = await stack.spawnWorkerProcess();
    run.send({ $case: 'approveTool', value: { callId: proposed.calls[0]!.callId } });
    const completed = await run.waitFor('completed');
    expect(completed.content).toContain('using 1 tool result(s): 42');
    expect(run.of('toolStarted')).toHaveLength(1);
    run.close();
  });

  it('a turn handed back by a draining worker past its deadline: Completed has the answer once, not its start twice', async () => {
    // The shared worker gives way to one with a short drain deadline; SIGTERM hands the streaming turn back.
    worker!.kill('SIGKILL');
    const draining = await stack.spawnWorkerProcess({ CADRE_SHUTDOWN_GRACE_MS: '300' });
    const run = new Run();
    run.send({ $case: 'start', value: { prompt: 'Tell a long story [[scripted:words=300]] [[scripted:chunk_delay=40]]', sessionId: '', agentName: '', workingDir: '' } });
    const started = await run.waitFor('started');
    await run.waitFor('token');
    const exited = new Promise<number | null>((resolve) => draining.once('exit', resolve));
    draining.kill('SIGTERM');
    expect(await exited).toBe(0);
    worker = await stack.spawnWorkerProcess();
    const completed = await run.waitFor('completed', 60_000);
    const { messages } = (await httpClient(stack.url).get<{ messages: { content: string }[] }>(`/api/sessions/${started.sessionId}/messages`)).body;
    expect(completed.content).toBe(messages.at(-1)!.content);
    expect(run.of('turnCompleted').at(-1)!.content).toBe(completed.content);
    run.close();
  }, 90_000);

  it('after a gateway drain the run\'s turn keeps waiting: a Run naming its session is refused until the proposal is decided elsewhere', async () => {
    const gateway = await stack.addGateway();
    const run = new Run(`127.0.0.1:${gateway.port}`);
    run.send({ $case: 'start', value: { prompt: `Sum ${CALC('4+5')}`, sessionId: '', agentName: '', workingDir: '' } });
    const started = await run.waitFor('started');
    const proposed = await run.waitFor('toolsProposed');
    const drained = gateway.close();
    expect((await run.status).code).toBe(grpc.status.UNAVAILABLE);
    await drained;
    stack.gateways.splice(stack.gateways.indexOf(gateway), 1);
    run.close();

    // (That the call's end after the drain's status cancels nothing is pinned by tests/session-edges-drain.int.test.ts: here
    // the drain quits the gateway's Redis a few ms after the status, before that end could reach it.)
    // kontekst ties a run to its stream and has no way back to it; here the turn outlives the drain, still waiting. A
    // Run naming the session is refused, and its ending (the client closes it) cancels nothing of the turn it was refused.
    const again = new Run();
    again.send({ $case: 'start', value: { prompt: 'Go on', sessionId: started.sessionId, agentName: '', workingDir: '' } });
    expect(await again.status).toMatchObject({ code: grpc.status.FAILED_PRECONDITION, details: 'a turn is already in progress' });
    expect(again.events).toEqual([]);
    again.end();
    again.close();

    // The proposal is an approval like any other: listed and decided over HTTP, and the turn goes on.
    const api = httpClient(stack.url);
    const pending = await api.get<{ approvals: { approval_id: string; call_id: string }[] }>(`/api/approvals?workspace_id=default&session_id=${started.sessionId}&status=pending`);
    expect(pending.body.approvals.map((a) => a.call_id)).toEqual([proposed.calls[0]!.callId]);
    expect((await api.post(`/api/approvals/${pending.body.approvals[0]!.approval_id}/decision`, { approved: true })).status).toBe(200);
    await waitUntil('the run\'s turn to end', async () => {
      const log = await api.get<{ events: { event_type: string; payload: Record<string, unknown> }[] }>(`/api/sessions/${started.sessionId}/events?limit=1000`);
      return log.body.events.some((e) => e.event_type === 'turn_complete' && e.payload.stop_reason === 'end_turn');
    });

    // With the turn ended, a Run naming the session starts the next one and sees what the first did.
    const next = new Run();
    next.send({ $case: 'start', value: { prompt: 'And now?', sessionId: started.sessionId, agentName: '', workingDir: '' } });
    expect((await next.waitFor('completed')).content).toContain('Scripted answer to "And now?"');
    next.close();
  });

  it('a command the gateway refuses ends the call with its status and changes nothing: the turn keeps waiting on its proposal', async () => {
    const run = new Run();
    run.send({ $case: 'start', value: { prompt: `Sum ${CALC('6+7')}`, sessionId: '', agentName: '', workingDir: '' } });
    const started = await run.waitFor('started');
    const proposed = await run.waitFor('toolsProposed');
    // An id past its 256-character bound: INVALID_ARGUMENT, sent by the gateway. grpc-js then emits 'cancelled' on
    // the server's side too, which must not read as the client going away (a drain's UNAVAILABLE ends the same way).
    run.send({ $case: 'approveTool', value: { callId: 'c'.repeat(300) } });
    expect((await run.status).code).toBe(grpc.status.INVALID_ARGUMENT);
    run.close();

    // The proposal still waits; decided over HTTP, the turn ends as the model ends it, not cancelled.
    const api = httpClient(stack.url);
    const pending = await api.get<{ approvals: { approval_id: string; call_id: string }[] }>(`/api/approvals?workspace_id=default&session_id=${started.sessionId}&status=pending`);
    expect(pending.body.approvals.map((a) => a.call_id)).toEqual([proposed.calls[0]!.callId]);
    expect((await api.post(`/api/approvals/${pending.body.approvals[0]!.approval_id}/decision`, { approved: true })).status).toBe(200);
    const stops = await waitUntil('the run\'s turn to end', async () => {
      const log = await api.get<{ events: { event_type: string; payload: Record<string, unknown> }[] }>(`/api/sessions/${started.sessionId}/events?limit=1000`);
      const ends = log.body.events.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason);
      return ends.length > 0 && ends;
    });
    expect(stops).toEqual(['end_turn']);
  });

  it('a client whose connection drops while its start is in flight leaves no turn behind: the turn its start began is cancelled', async () => {
    const api = httpClient(stack.url);
    const created = await api.post<{ session: { session_id: string } }>('/api/sessions', {
      workspace_id: 'default', approval_policy: { rules: [{ tool: '*', action: 'ask', timeout_secs: 600 }] },
    });
    const sessionId = created.body.session.session_id;
    const gateway = stack.gateways[0]!;
    const watchers = gateway.fanout.watcherCount();
    // Writes wait while Redis is paused: the start reads the session, opens its watch and then waits in sendMessage,
    // the turn not yet started, when the client's connection drops (a killed CLI: no half-close, no RST_STREAM).
    const admin = stack.redis.connect();
    await admin.call('CLIENT', 'PAUSE', '10000', 'WRITE');
    try {
      const client = http2.connect(`http://127.0.0.1:${gateway.port}`);
      client.on('error', () => undefined);
      const call = client.request({
        ':method': 'POST', ':path': kontekst.AgentServiceService.run.path, 'content-type': 'application/grpc', te: 'trailers', authorization: `Bearer ${TEST_API_KEY}`,
      });
      call.on('error', () => undefined);
      const start = kontekst.RunCommand.encode({ command: { $case: 'start', value: { prompt: `Sum ${CALC('8+9')}`, sessionId, agentName: '', workingDir: '' } } }).finish();
      const frame = Buffer.alloc(5 + start.length);
      frame.writeUInt32BE(start.length, 1);
      frame.set(start, 5);
      call.write(frame);
      await waitUntil('the start to open its watch', () => gateway.fanout.watcherCount() > watchers);
      client.socket.destroy();
      // Time for the gateway to take the loss in before the start goes on (nothing the test can see tells it).
      await new Promise((resolve) => setTimeout(resolve, 300));
    } finally {
      await admin.call('CLIENT', 'UNPAUSE');
      admin.disconnect();
    }

    // The start went on and started its turn; the client's going away, taken after it, cancels that turn.
    const stops = await waitUntil('the turn to end', async () => {
      const log = await api.get<{ events: { event_type: string; payload: Record<string, unknown> }[] }>(`/api/sessions/${sessionId}/events?limit=1000`);
      const ends = log.body.events.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason);
      return ends.length > 0 && ends;
    });
    expect(stops).toEqual(['cancelled']);
  });

  it('the model\'s reasoning streams as ReasoningDelta and ends up in TurnCompleted and RunCompleted', async () => {
    const run = new Run();
    run.send({ $case: 'start', value: { prompt: 'Think first [[scripted:think=Let me add these up carefully]]', sessionId: '', agentName: '', workingDir: '' } });
    const completed = await run.waitFor('completed');
    expect(run.of('reasoning').map((r) => r.text).join('')).toBe('Let me add these up carefully');
    expect(completed.reasoning).toBe('Let me add these up carefully');
    expect(run.of('turnCompleted').at(-1)!.reasoning).toBe('Let me add these up carefully');
    // Reasoning comes before the answer's text, as the model streamed it.
    const cases = run.cases();
    expect(cases.lastIndexOf('reasoning')).toBeLessThan(cases.indexOf('token'));
    expect(completed.content).toBe('Scripted answer to "Think first [[scripted:think=Let me add these up carefully]]"');
    run.close();
  });

  it('a model error ends the run with RunFailed and the error', async () => {
    const run = new Run();
    run.send({ $case: 'start', value: { prompt: 'Fail [[scripted:fail=500]]', sessionId: '', agentName: '', workingDir: '' } });
    const started = await run.waitFor('started');
    const failed = await run.waitFor('failed', 60_000);
    expect((await run.status).code).toBe(grpc.status.OK);
    expect(failed.runId).toBe(started.runId);
    expect(failed.error).toContain('500');
    expect(run.cases().at(-1)).toBe('failed');
    expect(run.of('completed')).toEqual([]);
    const log = await httpClient(stack.url).get<{ events: { event_type: string; payload: Record<string, unknown> }[] }>(`/api/sessions/${started.sessionId}/events?limit=1000`);
    expect(log.body.events.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['error']);
    run.close();
  }, 90_000);

  it('refuses a run whose first command is not start, and a skill (Cadre has none)', async () => {
    const bad = new Run();
    bad.send({ $case: 'approveTool', value: { callId: 'x' } });
    expect(await bad.status).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: expect.stringContaining('first command') });
    bad.close();
    const skill = new Run();
    skill.send({ $case: 'start', value: { prompt: '', sessionId: '', agentName: '', workingDir: '', skill: { name: 'summarize', arguments: '' } } });
    expect((await skill.waitFor('failed')).error).toBe('skills not available');
    skill.close();
  });
});

describe('kontekst DaemonService', () => {
  it('GetStatus reports the gateway and the model server; Shutdown needs the operator (runs control) key, then drains', async () => {
    const gateway = await stack.addGateway();
    const target = `127.0.0.1:${gateway.port}`;
    const daemon = new kontekst.DaemonServiceClient(target, grpc.credentials.createInsecure()) as unknown as kontekst.DaemonServiceClient & grpc.Client;
    const bearer = new grpc.Metadata();
    bearer.set('authorization', `Bearer ${TEST_API_KEY}`);
    const unary = <Req, Res>(method: (req: Req, md: grpc.Metadata, cb: (err: grpc.ServiceError | null, res: Res) => void) => unknown, req: Req, md: grpc.Metadata) =>
      new Promise<{ err: grpc.ServiceError | null; res: Res }>((resolve) => method.call(daemon, req, md, (err, res) => resolve({ err, res })));

    const { err, res: status } = await unary<kontekst.GetStatusRequest, kontekst.GetStatusResponse>(daemon.getStatus, {}, bearer);
    expect(err).toBeNull();
    expect(status.bind).toMatch(new RegExp(`:${gateway.port}$`));
    expect(status.endpoint).toBe(stack.model.url.replace(/\/$/, ''));
    expect(status.llamaServerHealthy).toBe(true);
    expect(status.uptimeSeconds).toBeGreaterThanOrEqual(0);
    expect(Date.parse(status.startedAtRfc3339)).toBeLessThanOrEqual(Date.now());
    expect((await unary(daemon.getStatus, {}, new grpc.Metadata())).err?.code).toBe(grpc.status.UNAUTHENTICATED);

    // The bearer key of every workspace is not the operator key: refused, and the gateway keeps serving.
    const refused = await unary(daemon.shutdown, {}, bearer);
    expect(refused.err?.code).toBe(grpc.status.PERMISSION_DENIED);
    expect((await unary(daemon.getStatus, {}, bearer)).err).toBeNull();

    const control = new grpc.Metadata();
    control.set('x-windie-runs-control-key', CONTROL_KEY);
    const done = await unary<kontekst.ShutdownRequest, kontekst.ShutdownResponse>(daemon.shutdown, {}, control);
    expect(done.err).toBeNull();
    expect(done.res.message).toBe('shutting down');
    daemon.close();
    // Drained: the port stops answering.
    await waitUntil('the gateway to stop answering', () => fetch(`http://${target}/healthz`).then(() => false, () => true), { everyMs: 50 });
    stack.gateways.splice(stack.gateways.indexOf(gateway), 1);
  });
});

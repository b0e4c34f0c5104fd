import { randomBytes } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_API_KEY, grpcClient, httpClient, pollUntilTerminal, runsCall, waitUntil } from '@cadre/testing';
import { OtlpReceiver, type ReceivedSpan } from './support/otlp-receiver.ts';
import { SessionStream, sessionEventsWhen } from './support/session-client.ts';
import { TestStack } from './support/stack.ts';

// OTLP span kinds on the wire.
const SERVER = 2;
const PRODUCER = 4;
const CONSUMER = 5;
const CLIENT = 3;

const RUNS_API_KEY = 'trace-runs-key';
let stack: TestStack;
let receiver: OtlpReceiver;
let gatewayUrl: string;
let worker: ChildProcess;
const workerLog: string[] = [];

beforeAll(async () => {
  receiver = await OtlpReceiver.start();
  stack = await TestStack.start({ gateways: 0, workers: 0 });
  const otel = {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '50',
  };
  gatewayUrl = (await stack.spawnGatewayProcess({ ...otel, RUNS_API_KEY, RUNS_HEARTBEAT_INTERVAL_MS: '100' })).url;
  worker = await stack.spawnWorkerProcess(otel);
  await stack.spawnVmAgent('traced-vm', 'vm-t', { ...otel, CADRE_GATEWAY_URL: gatewayUrl, RUNS_API_KEY });
  let partial = '';
  worker.stdout!.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString()).split('\n');
    partial = lines.pop() ?? '';
    workerLog.push(...lines);
  });
});
afterAll(async () => {
  await stack?.stop();
  await receiver?.close();
});

/** The chain of spans from `span` up to the root of what the receiver saw. */
function ancestry(span: ReceivedSpan, byId: Map<string, ReceivedSpan>): ReceivedSpan[] {
  const chain = [span];
  for (let s = byId.get(span.parentSpanId); s; s = byId.get(s.parentSpanId)) chain.push(s);
  return chain;
}

describe('one trace follows a task across processes', () => {
  it('joins the caller\'s POST, the enqueue, each agent job in the worker process, its model calls and tool calls', async () => {
    const traceId = randomBytes(16).toString('hex');
    const callerSpanId = randomBytes(8).toString('hex');
    const res = await httpClient(gatewayUrl).post<{ task: { task_id: string } }>('/api/tasks', {
      workspace_id: 'traced',
      goal: 'Multiply',
      team: { workers: [{ role: 'calc', instructions: 'Compute. [[scripted:call=calculate({"expression":"6*7"})]]', tools: ['calculate'] }] },
    }, { traceparent: `00-${traceId}-${callerSpanId}-01` });
    expect(res.status).toBe(201);
    const taskId = res.body.task.task_id;
    const events = await pollUntilTerminal(gatewayUrl, taskId);
    expect(events.at(-1)!.event_type).toBe('task_completed');

    // Worker calc-1's model calls (2: the tool call, then the answer) and the lead's synthesis (1), and the tool.
    const spans = await waitUntil('the gateway\'s and the worker\'s spans to arrive', () => {
      const mine = receiver.spans.filter((s) => s.traceId === traceId);
      const chats = mine.filter((s) => s.name.startsWith('chat '));
      // A job's consumer span ends after BullMQ records the job, which may be after the task has ended; each process
      // exports on its own batch schedule, so the gateway's POST and enqueue spans may come after the worker's.
      const jobs = mine.filter((s) => s.service === 'cadre-worker' && s.kind === CONSUMER);
      const gateway = mine.some((s) => s.service === 'cadre-gateway' && s.kind === SERVER && s.name === 'POST /api/tasks')
        && mine.some((s) => s.service === 'cadre-gateway' && s.kind === PRODUCER);
      return gateway && chats.length >= 3 && jobs.length >= 2 && mine.some((s) => s.name === 'execute_tool calculate') ? mine : undefined;
    });
    const byId = new Map(spans.map((s) => [s.spanId, s]));

    // The gateway's server span continues the caller's trace and names the route and the task.
    const post = spans.find((s) => s.service === 'cadre-gateway' && s.kind === SERVER && s.name === 'POST /api/tasks')!;
    expect(post).toBeDefined();
    expect(post.parentSpanId).toBe(callerSpanId);
    expect(post.attributes).toMatchObject({ 'http.route': '/api/tasks', 'http.response.status_code': 201, task_id: taskId });

    // The enqueue (BullMQ's producer spans) hangs under the POST.
    const enqueue = spans.filter((s) => s.service === 'cadre-gateway' && s.kind === PRODUCER);
    expect(enqueue.length).toBeGreaterThan(0);
    for (const s of enqueue) expect(ancestry(s, byId)).toContain(post);

    // Each agent job ran in the worker process as a consumer span under the enqueue, naming its task and agent.
    const jobs = spans.filter((s) => s.service === 'cadre-worker' && s.kind === CONSUMER);
    expect(jobs.map((s) => s.attributes.worker_id).sort()).toEqual(['calc-1', 'lead']);
    for (const job of jobs) {
      expect(job.attributes.task_id).toBe(taskId);
      const chain = ancestry(job, byId);
      expect(chain.at(-1)).toBe(post);
      expect(chain.some((s) => s.kind === PRODUCER)).toBe(true);
    }

    // Model calls are GenAI client spans inside their job; the tool call too.
    const chats = spans.filter((s) => s.name.startsWith('chat '));
    for (const chat of chats) {
      expect(chat.kind).toBe(CLIENT);
      expect(jobs).toContain(byId.get(chat.parentSpanId));
      expect(chat.attributes).toMatchObject({ 'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'cadre-scripted' });
      expect(chat.attributes['gen_ai.usage.input_tokens']).toBeGreaterThan(0);
      expect(chat.attributes['gen_ai.usage.output_tokens']).toBeGreaterThan(0);
    }
    const calcJob = jobs.find((s) => s.attributes.worker_id === 'calc-1')!;
    const calcReasons = chats.filter((s) => s.parentSpanId === calcJob.spanId).map((s) => s.attributes['gen_ai.response.finish_reasons']);
    expect(calcReasons).toEqual([['tool_calls'], ['stop']]);
    const tool = spans.find((s) => s.name === 'execute_tool calculate')!;
    expect(tool.parentSpanId).toBe(calcJob.spanId);
    expect(tool.attributes).toMatchObject({ 'gen_ai.tool.name': 'calculate' });

    // Every log line the worker wrote about this task carries the trace id.
    const lines = workerLog.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.taskId === taskId);
    expect(lines.length).toBeGreaterThan(0);
    for (const line of lines) expect(line.trace_id).toBe(traceId);
  });

  it('follows a session turn through its parks: the POST, each turn job, its model calls, the client\'s tool result, the approval and the tool it let run', async () => {
    const api = httpClient(gatewayUrl);
    const created = await api.post<{ session: { session_id: string } }>('/api/sessions', {
      workspace_id: 'traced-sessions',
      tools: [{ name: 'get_location', description: 'Where the user is', parameters: { type: 'object', properties: {} } }],
      approval_policy: { rules: [{ tool: 'calculate', action: 'ask', reason: 'check the maths' }] },
    });
    expect(created.status).toBe(201);
    const sessionId = created.body.session.session_id;
    const eventOf = async (type: string) => (await sessionEventsWhen(gatewayUrl, sessionId, (events) => events.some((e) => e.event_type === type))).find((e) => e.event_type === type)!;

    const traceId = randomBytes(16).toString('hex');
    const callerSpanId = randomBytes(8).toString('hex');
    // The model asks the client for its location (the turn parks), then asks to calculate, which the policy asks an
    // operator about (the turn parks again); once approved the tool runs and the model answers.
    const sent = await api.post(`/api/sessions/${sessionId}/messages`, {
      content: 'Where, and how much? [[scripted:call=get_location({})]] [[scripted:call=calculate({"expression":"6*7"})]]',
    }, { traceparent: `00-${traceId}-${callerSpanId}-01` });
    expect(sent.status).toBe(202);
    const request = await eventOf('tool_request');
    // Answered once the turn has parked (an answer that comes sooner is taken by the running job, with no park).
    const parked = () => waitUntil('the turn to park', async () => (await api.get<{ session: { status: string } }>(`/api/sessions/${sessionId}`)).body.session.status === 'waiting_tool');
    await parked();
    // The client's answer and the operator's decision come in requests of their own (no traceparent).
    expect((await api.post(`/api/sessions/${sessionId}/tool-results`, { tool_call_id: request.payload.tool_call_id, success: true, result: 'Oslo' })).status).toBe(200);
    const asked = await eventOf('approval_requested');
    const approvalId = asked.payload.approval_id as string;
    await parked();
    expect((await api.post(`/api/approvals/${approvalId}/decision`, { approved: true })).status).toBe(200);
    expect((await eventOf('turn_complete')).payload.stop_reason).toBe('end_turn');

    const spans = await waitUntil('the turn\'s spans to arrive', () => {
      const mine = receiver.spans.filter((s) => s.traceId === traceId);
      const jobs = mine.filter((s) => s.service === 'cadre-worker' && s.kind === CONSUMER && s.attributes.session_id === sessionId && s.attributes['cadre.wake'] !== undefined);
      const chats = mine.filter((s) => s.name.startsWith('chat '));
      // Spans reach the receiver in each process's batches: wait until every job's chain up is in.
      const byId = new Map(mine.map((s) => [s.spanId, s]));
      const rooted = jobs.every((job) => ancestry(job, byId).at(-1)!.parentSpanId === callerSpanId);
      return rooted && jobs.length >= 3 && chats.length >= 3 && mine.some((s) => s.name === 'execute_tool calculate') ? mine : undefined;
    });
    const byId = new Map(spans.map((s) => [s.spanId, s]));
    const one = (name: string) => {
      const found = spans.filter((s) => s.name === name);
      expect(found.map((s) => s.name)).toEqual([name]);
      return found[0]!;
    };

    // The gateway's receive: the POST continues the caller's trace; the user message (and its enqueue) below it.
    const post = spans.find((s) => s.service === 'cadre-gateway' && s.kind === SERVER && s.name === 'POST /api/sessions/:session_id/messages')!;
    expect(post.parentSpanId).toBe(callerSpanId);
    const userMessage = one('user_message');
    expect(userMessage.parentSpanId).toBe(post.spanId);
    expect(userMessage.attributes.session_id).toBe(sessionId);

    // Three jobs ran the turn on the worker (its start and two continuations), all in this one trace, each below
    // the POST; the first two parked.
    const jobs = spans.filter((s) => s.service === 'cadre-worker' && s.kind === CONSUMER && s.attributes['cadre.wake'] !== undefined).sort((a, b) => Number(a.attributes['cadre.wake']) - Number(b.attributes['cadre.wake']));
    expect(jobs.map((s) => s.attributes.session_id)).toEqual([sessionId, sessionId, sessionId]);
    for (const job of jobs) {
      expect(ancestry(job, byId).at(-1)).toBe(post);
      expect(ancestry(job, byId)).toContain(userMessage);
    }
    const [first, second, third] = jobs as [ReceivedSpan, ReceivedSpan, ReceivedSpan];
    const parks = spans.filter((s) => s.name === 'park');
    expect(parks.map((s) => s.parentSpanId).sort()).toEqual([first.spanId, second.spanId].sort());
    for (const park of parks) expect(park).toMatchObject({ service: 'cadre-worker', attributes: { session_id: sessionId, 'cadre.parked': true } });

    // The client's tool result joined the first job's trace on the gateway, and the second job continues it.
    const toolResult = one('tool_result');
    expect(toolResult.service).toBe('cadre-gateway');
    expect(toolResult.parentSpanId).toBe(first.spanId);
    expect(toolResult.attributes).toMatchObject({ session_id: sessionId, 'gen_ai.tool.call.id': request.payload.tool_call_id });
    expect(ancestry(second, byId)).toContain(toolResult);
    // It links the request that brought the result (a trace of its own).
    const [linked] = toolResult.links;
    const resultPost = receiver.spans.find((s) => `${s.traceId}/${s.spanId}` === linked);
    expect(resultPost).toMatchObject({ service: 'cadre-gateway', kind: SERVER, name: 'POST /api/sessions/:session_id/tool-results' });
    expect(resultPost!.traceId).not.toBe(traceId);

    // The approval: asked in the second job, decided on the gateway in the same trace; the third job continues it
    // and runs the tool.
    const requested = one('approval_requested');
    expect(requested).toMatchObject({ service: 'cadre-worker', parentSpanId: second.spanId });
    expect(requested.attributes).toMatchObject({ approval_id: approvalId, 'gen_ai.tool.name': 'calculate' });
    const decided = one('approval_decided');
    expect(decided).toMatchObject({ service: 'cadre-gateway', parentSpanId: second.spanId });
    expect(decided.attributes).toMatchObject({ approval_id: approvalId, session_id: sessionId, 'cadre.approval.status': 'approved' });
    expect(ancestry(third, byId)).toContain(decided);
    expect(one('execute_tool calculate').parentSpanId).toBe(third.spanId);

    // Each model call is a GenAI client span of its job: get_location, calculate, then the answer.
    const chats = spans.filter((s) => s.name.startsWith('chat '));
    expect(chats.map((c) => [jobs.indexOf(byId.get(c.parentSpanId)!), c.attributes['gen_ai.response.finish_reasons']])).toEqual([[0, ['tool_calls']], [1, ['tool_calls']], [2, ['stop']]]);
  });

  it('makes each turn of a roz StreamSession a trace of its own, linked to the call\'s span (which lasts as long as the connection)', async () => {
    const traceId = randomBytes(16).toString('hex');
    const callerSpanId = randomBytes(8).toString('hex');
    const client = grpcClient(gatewayUrl.replace('http://', ''));
    const stream = new SessionStream(client, TEST_API_KEY, { traceparent: `00-${traceId}-${callerSpanId}-01` });
    stream.send({ $case: 'start', value: { environmentId: 'traced-roz' } });
    const started = await stream.waitForCase('sessionStarted');
    const sessionId = (started.response!.value as { sessionId: string }).sessionId;
    for (const messageId of ['m-1', 'm-2']) {
      const from = stream.frames.length;
      stream.send({ $case: 'userMessage', value: { content: `Hello (${messageId})`, messageId } });
      await stream.waitForCase('turnComplete', undefined, from);
    }
    // Half-closed with no turn running, the call ends: its span ends (and is exported) with it.
    stream.end();
    expect((await stream.status).code).toBe(0);
    client.close();

    const { call, turns, jobs } = await waitUntil('the call\'s and both turns\' spans to arrive', () => {
      const call = receiver.spans.find((s) => s.traceId === traceId && s.name === 'roz.v1.AgentService/StreamSession');
      const turns = receiver.spans.filter((s) => s.name === 'user_message' && s.attributes.session_id === sessionId);
      const jobs = receiver.spans.filter((s) => s.service === 'cadre-worker' && s.kind === CONSUMER && s.attributes.session_id === sessionId);
      return call && turns.length === 2 && jobs.length >= 2 ? { call, turns, jobs } : undefined;
    });
    expect(call).toMatchObject({ service: 'cadre-gateway', kind: SERVER, parentSpanId: callerSpanId });
    // Each turn is the root of its own trace and links the call; its job on the worker runs in that trace.
    expect(turns.map((t) => t.attributes['cadre.message_id']).sort()).toEqual(['m-1', 'm-2']);
    expect(new Set(turns.map((t) => t.traceId)).size).toBe(2);
    for (const turn of turns) {
      expect(turn.traceId).not.toBe(traceId);
      expect(turn.parentSpanId).toBe('');
      expect(turn.links).toEqual([`${traceId}/${call.spanId}`]);
      expect(jobs.filter((j) => j.traceId === turn.traceId)).toHaveLength(1);
    }
    // The call's own trace holds none of the turns' work.
    expect(receiver.spans.filter((s) => s.traceId === traceId && (s.name === 'user_message' || s.service === 'cadre-worker'))).toEqual([]);
  });

  it('follows a VM run: the agent\'s run span holds its dispatch, model call and relays, and the gateway\'s spans for them join', async () => {
    const created = await runsCall(gatewayUrl, RUNS_API_KEY, 'POST', '/api/runs/', { workspace_id: 'traced-vm', query: 'Say hi' });
    const runId = created.body.run.run_id as string;
    const spans = await waitUntil('the run\'s spans to arrive', () => {
      const run = receiver.spans.find((s) => s.service === 'cadre-vm-agent' && s.name === 'run' && s.attributes.run_id === runId);
      if (!run) return undefined;
      const mine = receiver.spans.filter((s) => s.traceId === run.traceId);
      const relayed = mine.some((s) => s.service === 'cadre-gateway' && s.name === 'POST /api/runs/:run_id/events');
      return relayed && mine.some((s) => s.name.startsWith('chat ')) ? mine : undefined;
    });
    const byId = new Map(spans.map((s) => [s.spanId, s]));
    const run = spans.find((s) => s.name === 'run')!;
    for (const op of ['dispatch', 'relay']) {
      const call = spans.find((s) => s.service === 'cadre-vm-agent' && s.name === op)!;
      expect(call.kind).toBe(CLIENT);
      expect(call.attributes.run_id).toBe(runId);
      expect(ancestry(call, byId)).toContain(run);
    }
    expect(ancestry(spans.find((s) => s.name.startsWith('chat '))!, byId)).toContain(run);
    // The gateway's server spans continue the agent's calls (traceparent) and name the run.
    const served = spans.filter((s) => s.service === 'cadre-gateway' && s.kind === SERVER);
    expect(served.map((s) => s.name)).toEqual(expect.arrayContaining(['POST /api/runs/:run_id/worker-dispatched', 'POST /api/runs/:run_id/events']));
    for (const s of served) {
      expect(s.attributes.run_id).toBe(runId);
      expect(byId.get(s.parentSpanId)?.service).toBe('cadre-vm-agent');
    }
  });
});

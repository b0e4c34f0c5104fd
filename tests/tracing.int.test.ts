import { randomBytes } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpClient, pollUntilTerminal, runsCall, waitUntil } from '@cadre/testing';
import { OtlpReceiver, type ReceivedSpan } from './support/otlp-receiver.ts';
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
    const spans = await waitUntil('the worker\'s spans to arrive', () => {
      const mine = receiver.spans.filter((s) => s.traceId === traceId);
      const chats = mine.filter((s) => s.name.startsWith('chat '));
      // A job's consumer span ends after BullMQ records the job, which may be after the task has ended.
      const jobs = mine.filter((s) => s.service === 'cadre-worker' && s.kind === CONSUMER);
      return chats.length >= 3 && jobs.length >= 2 && mine.some((s) => s.name === 'execute_tool calculate') ? mine : undefined;
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

// Backpressure at the edges (invariant 3): a watcher that stops reading is closed with a resumable cursor once it
// falls CADRE_WATCHER_BUFFER events behind, while the other watchers of the same task keep receiving everything;
// a bidi call whose client sends requests but does not read their answers stops being read.
// The stalled readers are real clients that stop reading their socket, so HTTP/2 flow control (gRPC) and TCP
// (SSE) push back on the gateway's writes exactly as a slow network would.
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertContiguous, grpcClient, untilStill, watchTeam, TEST_API_KEY } from '@cadre/testing';
import { KeyBuilder, TaskStore, connectRedis, workerIdFor } from '@cadre/store';
import { SessionRequest, kontekst, type AgentServiceClient, type DeepPartial, type SessionResponse, type TeamEventProto } from '@cadre/protocol';
import { TestStack } from './support/stack.ts';

const BUFFER = 16;
/** Large enough that the burst overflows every socket and flow-control buffer between gateway and client. */
const BURST = 400;
const PAYLOAD = JSON.stringify({ blob: 'x'.repeat(16 * 1024) });
/** Requests a client sends without reading: their answers are far more than HTTP/2's windows and buffers hold. */
const FLOOD = 10_000;
/** What fills each flooding request to 1 KiB, so that they too outgrow the windows many times over. */
const KIB = 'x'.repeat(1024);

let stack: TestStack;
let store: TaskStore;
let client: AgentServiceClient;

beforeAll(async () => {
  stack = await TestStack.start({ gateways: 1, workers: 0, env: { CADRE_WATCHER_BUFFER: String(BUFFER) } });
  store = new TaskStore({ redis: connectRedis(stack.redis.url, 'backpressure-test'), keys: new KeyBuilder(stack.prefix) });
  client = grpcClient(stack.grpcTarget);
});
afterAll(async () => {
  client?.close();
  await stack?.stop();
});

/** A running task whose one worker attempt this test holds, so it can append that worker's events. */
async function liveTask(): Promise<{ taskId: string; workerId: string; lease: string }> {
  const { task } = await store.createTask({
    workspace_id: 'backpressure',
    goal: 'burst',
    team: { lead: { instructions: 'lead' }, workers: [{ role: 'burst', instructions: 'append', tools: [] }], max_workers: 1 },
    metadata: {},
  });
  const workerId = workerIdFor('burst', 1);
  const lease = randomUUID();
  await store.claimWorker(task.task_id, workerId, lease, 'test-host');
  return { taskId: task.task_id, workerId, lease };
}

/**
 * Appends the burst, paced by the reading watcher (`readerSeq`): it is never more than half the buffer behind,
 * so only the watcher that stopped reading can overflow, however slow this machine is.
 */
async function burstThenFinish(t: { taskId: string; workerId: string; lease: string }, readerSeq: () => number): Promise<number> {
  for (let i = 0; i < BURST; i++) {
    const seq = await store.appendWorkerEvent(t.taskId, t.workerId, t.lease, 'worker_tool_call', { tool: 'burst', call_id: `c${i}`, arguments: PAYLOAD });
    while (seq - readerSeq() > BUFFER / 2) await new Promise((r) => setTimeout(r, 5));
  }
  const usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
  await store.finishWorker(t.taskId, t.workerId, t.lease, { outcome: 'completed', result: 'done', usage }, { status: 'completed', result: 'done', usage });
  return (await store.getTask(t.taskId))!.last_seq;
}

/** A watcher that reads everything, exposing how far it got. */
function readingWatch(taskId: string): { lastSeq: () => number; done: Promise<{ seqs: number[]; status: grpc.StatusObject }> } {
  const seqs: number[] = [];
  const call = client.watchTeam({ taskId, afterSeq: 0 }, metadata());
  const done = new Promise<{ seqs: number[]; status: grpc.StatusObject }>((resolve) => {
    call.on('data', (e: TeamEventProto) => seqs.push(Number(e.seq)));
    call.on('error', () => undefined); // the status carries the code
    call.on('status', (status: grpc.StatusObject) => resolve({ seqs, status }));
  });
  return { lastSeq: () => seqs.at(-1) ?? 0, done };
}

function metadata(): grpc.Metadata {
  const md = new grpc.Metadata();
  md.set('authorization', `Bearer ${TEST_API_KEY}`);
  return md;
}

describe('a watcher that stops reading', () => {
  it('over gRPC is closed with RESOURCE_EXHAUSTED and its cursor; the other watcher gets the whole log', async () => {
    const task = await liveTask();
    const stalledSeqs: number[] = [];
    const stalled = client.watchTeam({ taskId: task.taskId, afterSeq: 0 }, metadata());
    const stalledEnd = new Promise<grpc.StatusObject>((resolve) => {
      stalled.on('error', () => undefined); // the status below carries the code
      stalled.on('status', resolve);
    });
    // Read the backlog (task_queued, worker_started), then stop reading: the watcher is attached and caught up.
    await new Promise<void>((resolve) => {
      stalled.on('data', (e: TeamEventProto) => {
        stalledSeqs.push(Number(e.seq));
        if (Number(e.seq) === 2) {
          stalled.pause();
          resolve();
        }
      });
    });
    const healthy = readingWatch(task.taskId);

    const lastSeq = await burstThenFinish(task, healthy.lastSeq);

    const reader = await healthy.done;
    expect(reader.status.code).toBe(grpc.status.OK);
    assertContiguous(reader.seqs);
    expect(reader.seqs.at(-1)).toBe(lastSeq);

    stalled.resume();
    const status = await stalledEnd;
    expect(status.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    const cursor = Number(/after_seq=(\d+)/.exec(status.details)?.[1]);
    // It got everything up to its cursor, in order, and far less than the log: it was cut off, not fed.
    assertContiguous(stalledSeqs);
    expect(stalledSeqs.at(-1)).toBe(cursor);
    expect(cursor).toBeLessThan(lastSeq);

    // The cursor is resumable: the rest of the log follows with no gap, to the end.
    const rest = await watchTeam(client, { taskId: task.taskId, afterSeq: cursor });
    expect(rest.status.code).toBe(grpc.status.OK);
    assertContiguous(rest.events.map((e) => Number(e.seq)), cursor + 1);
    expect(Number(rest.events.at(-1)!.seq)).toBe(lastSeq);
  });

  it('over SSE gets an error event naming its last seq; a gRPC watcher of the same task is unaffected', async () => {
    const task = await liveTask();
    let body = '';
    let caughtUp = false;
    const response = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = http.get(`${stack.url}/api/tasks/${task.taskId}/stream`, { headers: { authorization: `Bearer ${TEST_API_KEY}` } }, resolve);
      req.on('error', reject);
    });
    expect(response.statusCode).toBe(200);
    const ended = new Promise<void>((resolve) => response.on('end', resolve));
    await new Promise<void>((resolve) => {
      response.on('data', (chunk: Buffer) => {
        body += chunk.toString();
        if (!caughtUp && /^id: 2$/m.test(body)) {
          caughtUp = true;
          response.pause();
          resolve();
        }
      });
    });
    const healthy = readingWatch(task.taskId);

    const lastSeq = await burstThenFinish(task, healthy.lastSeq);
    const reader = await healthy.done;
    expect(reader.status.code).toBe(grpc.status.OK);
    expect(reader.seqs.at(-1)).toBe(lastSeq);

    response.resume();
    await ended;
    const ids = [...body.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]));
    assertContiguous(ids);
    const error = /event: error\ndata: (.*)\n/.exec(body);
    expect(error).not.toBeNull();
    const payload = JSON.parse(error![1]!) as { code: string; message: string; last_seq: number };
    expect(payload.code).toBe('resource_exhausted');
    expect(payload.message).toContain(`after_seq=${payload.last_seq}`);
    expect(payload.last_seq).toBe(ids.at(-1));
    expect(payload.last_seq).toBeLessThan(lastSeq);
  });
});

describe('a client that sends requests without reading the answers', () => {
  it('over gRPC StreamSession is held back by flow control, then answered in order once it reads', async () => {
    const call = client.streamSession(metadata());
    const frames: SessionResponse[] = [];
    call.on('data', (frame: SessionResponse) => frames.push(frame));
    // A client that stops reading: its answers wait in the HTTP/2 windows and then in the gateway.
    call.pause();
    const status = new Promise<grpc.StatusObject>((resolve) => {
      call.on('error', () => undefined); // the status carries the code
      call.on('status', resolve);
    });
    call.write(SessionRequest.fromPartial({ request: { $case: 'start', value: { environmentId: 'demo' } } }));
    // Each request is answered in band: a Pong, or (roz's media, which Cadre does not serve) SessionError unimplemented.
    const answers: string[] = [];
    let taken = 0;
    for (let i = 0; i < FLOOD; i++) {
      const ping = i % 100 === 99;
      const request: DeepPartial<SessionRequest>['request'] = ping ? { $case: 'ping', value: {} } : { $case: 'webrtcAnswer', value: { hostId: 'h', sdp: KIB } };
      call.write(SessionRequest.fromPartial({ request }), () => taken++);
      answers.push(ping ? 'pong' : 'unimplemented');
    }

    // The gateway stops reading a call whose answers cannot go out: the client's writes stall (their callbacks wait)
    // far short of the flood. On main all were taken, the answers piling up in the gateway's write buffer.
    await untilStill(() => taken, FLOOD);
    expect(taken).toBeLessThan(FLOOD / 2);

    // Once the client reads, every request is answered, in the order sent, and the call ends OK on its half-close.
    call.resume();
    call.end();
    expect((await status).code).toBe(grpc.status.OK);
    expect(taken).toBe(FLOOD);
    const inBand = frames.filter((f) => f.response?.$case === 'pong' || f.response?.$case === 'error');
    expect(inBand.map((f) => (f.response?.$case === 'error' ? f.response.value.code : 'pong'))).toEqual(answers);
    expect(frames.filter((f) => f.response?.$case === 'sessionStarted')).toHaveLength(1);
  });

  it('over kontekst Run likewise (the same call handling)', async () => {
    const runs = new kontekst.AgentServiceClient(stack.grpcTarget, grpc.credentials.createInsecure());
    const call = runs.run(metadata());
    const events: string[] = [];
    call.on('data', (e: kontekst.RunEvent) => events.push(e.event?.$case ?? ''));
    call.pause();
    const status = new Promise<grpc.StatusObject>((resolve) => {
      call.on('error', () => undefined);
      call.on('status', resolve);
    });
    const start = (prompt: string): kontekst.RunCommand => ({ command: { $case: 'start', value: { prompt, sessionId: '', agentName: '', workingDir: '' } } });
    call.write(start('flood'));
    // A start after the first is answered RunFailed "run already started"; the run goes on.
    let taken = 0;
    for (let i = 0; i < FLOOD; i++) call.write(start(KIB), () => taken++);

    await untilStill(() => taken, FLOOD);
    expect(taken).toBeLessThan(FLOOD / 2);

    // Once it reads, every start is answered in order, then its cancel (sent last) ends the run.
    call.resume();
    call.write({ command: { $case: 'cancel', value: {} } });
    expect((await status).code).toBe(grpc.status.OK);
    expect(taken).toBe(FLOOD);
    expect(events).toEqual(['started', ...Array<string>(FLOOD).fill('failed'), 'cancelled']);
    runs.close();
  });
});

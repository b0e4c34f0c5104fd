import * as grpc from '@grpc/grpc-js';
import { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertContiguous, grpcClient, httpClient, keysMatching, waitUntil, type TestRedisClient } from '@cadre/testing';
import { AGENT_QUEUE, KeyBuilder } from '@cadre/store';
import type { AgentServiceClient } from '@cadre/protocol';
import { Scrape } from './support/prometheus.ts';
import { TestStack, freePort } from './support/stack.ts';
import { SessionStream, isCase, sessionEvents, sessionEventsWhen } from './support/session-client.ts';

// Workers and one gateway are real OS processes here: kill -9 is a real crash, cancel crosses processes.
let stack: TestStack;
let queue: Queue;
let redis: TestRedisClient;
let local: AgentServiceClient;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 0 });
  redis = stack.redis.connect();
  queue = new Queue(AGENT_QUEUE, { connection: redis, prefix: new KeyBuilder(stack.prefix).bullPrefix() });
  local = grpcClient(stack.grpcTarget);
});
afterAll(async () => {
  local?.close();
  await queue?.close();
  redis?.disconnect();
  await stack?.stop();
});

interface Ev {
  seq: number;
  event_type: string;
  payload: Record<string, any>;
}

const events = (sessionId: string): Promise<Ev[]> => sessionEvents<Ev>(stack.url, sessionId);

const eventsUntil = (sessionId: string, pred: (e: Ev) => boolean, timeoutMs?: number): Promise<Ev[]> =>
  sessionEventsWhen<Ev>(stack.url, sessionId, (all) => all.some(pred), timeoutMs);

const startFrame = (tools: object[] = [], extra: object = {}) => ({ $case: 'start' as const, value: { environmentId: 'crash', tools, ...extra } });
const sessionIdOf = (s: SessionStream): string => (s.frames.find(isCase('sessionStarted'))!.response!.value as { sessionId: string }).sessionId;
/** Waits until the session is parked on its client tools and no job is active: parking holds no worker slot. */
async function parkedWithNoActiveJob(sessionId: string): Promise<void> {
  const api = httpClient(stack.url);
  await waitUntil('the session to wait on its tool', async () => (await api.get<{ session: { status: string } }>(`/api/sessions/${sessionId}`)).body.session.status === 'waiting_tool');
  await waitUntil('no active job', async () => (await queue.getActiveCount()) === 0);
}

const text = (evs: Ev[], fromSeq = 0): string => evs.filter((e) => e.event_type === 'text_delta' && e.seq > fromSeq).map((e) => e.payload.content).join('');

type WorkerProcess = Awaited<ReturnType<TestStack['spawnWorkerProcess']>>;

/** A new session's turn, started on a worker process (`env`) that is killed (-9) once the answer streams. */
async function turnWhoseWorkerDies(env: Record<string, string>, content: string): Promise<{ id: string; first: WorkerProcess }> {
  const first = await stack.spawnWorkerProcess(env);
  const api = httpClient(stack.url);
  const id = (await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'crash' })).body.session.session_id;
  await api.post(`/api/sessions/${id}/messages`, { content });
  await eventsUntil(id, (e) => e.event_type === 'text_delta');
  first.kill('SIGKILL');
  return { id, first };
}

describe('a worker killed mid-turn', () => {
  it('resumes the turn on another worker from its last boundary: no duplicated seq, the tool not run again', async () => {
    const env = { CADRE_JOB_LOCK_MS: '1500' };
    // The tool ran and its result is a boundary; the answer is streaming when the worker dies.
    const { id, first } = await turnWhoseWorkerDies(env, 'Compute then explain [[scripted:call=calculate({"expression":"6*7"})]] [[scripted:words=150]] [[scripted:chunk_delay=30]]');
    let second: WorkerProcess | undefined;
    try {
      second = await stack.spawnWorkerProcess(env);
      const all = await eventsUntil(id, (e) => e.event_type === 'turn_complete', 30_000);
      assertContiguous(all.map((e) => e.seq));
      const types = all.map((e) => e.event_type);
      expect(types.filter((t) => t === 'tool_call')).toHaveLength(1);
      expect(all.filter((e) => e.event_type === 'tool_result')).toEqual([expect.objectContaining({ payload: expect.objectContaining({ tool_name: 'calculate', result: '42' }) })]);
      const lost = all.find((e) => e.event_type === 'attempt_lost')!;
      expect(lost.payload).toMatchObject({ attempt: 1 });
      expect(lost.payload.host_id).toContain(`:${first.pid}`);
      expect(types.filter((t) => t === 'turn_complete')).toHaveLength(1);
      // After the lost attempt, the answer streams again whole, from the model call that had no boundary yet.
      expect(text(all, lost.seq)).toMatch(/^Scripted answer to "Compute then explain.*using 1 tool result\(s\): 42\. w0 scripted.*w144/s);
      expect(all.find((e) => e.event_type === 'turn_complete')!.payload.stop_reason).toBe('end_turn');
      const transcript = await redis.lrange(new KeyBuilder(stack.prefix).session(id).transcript, 0, -1);
      expect(transcript.map((m) => JSON.parse(m).role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
      // The turn's job leaves `active` just after turn_complete is readable. Killed before that, the worker would
      // leave it active for the next test's stall check to fail as a lost job (the stack is shared).
      await waitUntil('no active job', async () => (await queue.getActiveCount()) === 0);
    } finally {
      first.kill('SIGKILL');
      second?.kill('SIGKILL');
    }
  });
});

describe('a turn that loses its worker too often', () => {
  it('ends in a worker_lost error, counted with its duration by the worker that gave up on it', async () => {
    // One attempt only: the first lost worker is one too many, and the next worker's stall check fails the job.
    const env = { CADRE_JOB_LOCK_MS: '1500', CADRE_MAX_ATTEMPTS: '1' };
    const { id, first } = await turnWhoseWorkerDies(env, 'Tell me at length [[scripted:words=200]] [[scripted:chunk_delay=50]]');
    let second: WorkerProcess | undefined;
    try {
      const port = await freePort();
      second = await stack.spawnWorkerProcess({ ...env, WORKER_METRICS_PORT: String(port), WORKER_METRICS_HOST: '127.0.0.1' });
      const all = await eventsUntil(id, (e) => e.event_type === 'turn_complete', 30_000);
      expect(all.find((e) => e.event_type === 'session_error')!.payload).toMatchObject({ code: 'worker_lost' });
      expect(all.find((e) => e.event_type === 'turn_complete')!.payload.stop_reason).toBe('error');

      // The worker counts the turn once the store's reply says it ended it (just after turn_complete is readable).
      const scrape = () => Scrape.of(`http://127.0.0.1:${port}/metrics`);
      await waitUntil('the worker to count the lost turn', async () => (await scrape()).value('cadre_session_turns_total', { outcome: 'error' }) === 1);
      const counted = await scrape();
      expect(counted.value('cadre_agent_jobs_lost_total')).toBe(1);
      // Its duration (user message → the give-up) is in the turn histogram like any other turn's.
      expect(counted.value('cadre_session_turn_duration_seconds_count')).toBe(1);
      expect(counted.value('cadre_session_turn_duration_seconds_sum')).toBeGreaterThan(0);
    } finally {
      first.kill('SIGKILL');
      second?.kill('SIGKILL');
    }
  });

  it('leaves nothing queued behind it: its leftover steer and the follow-ups start the next turn, as after any error', async () => {
    const env = { CADRE_JOB_LOCK_MS: '1500', CADRE_MAX_ATTEMPTS: '1' };
    const { id, first } = await turnWhoseWorkerDies(env, 'Tell me at length [[scripted:words=200]] [[scripted:chunk_delay=50]]');
    let second: WorkerProcess | undefined;
    try {
      // Queued while the turn has no worker: it is still running, so they wait behind it.
      const api = httpClient(stack.url);
      for (const [path, inputId] of [['steer', 's1'], ['follow-ups', 'f1']] as const) {
        expect((await api.post<{ outcome: string }>(`/api/sessions/${id}/${path}`, { content: `Then ${inputId}`, input_id: inputId })).body.outcome).toBe('queued');
      }
      second = await stack.spawnWorkerProcess(env);
      const all = await sessionEventsWhen<Ev>(stack.url, id, (evs) => evs.filter((e) => e.event_type === 'turn_complete').length === 2, 20_000);
      assertContiguous(all.map((e) => e.seq));
      expect(all.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['error', 'end_turn']);
      expect(all.filter((e) => e.event_type === 'input_delivered').map((e) => [e.payload.input_id, e.payload.turn])).toEqual([['s1', 2], ['f1', 2]]);
    } finally {
      first.kill('SIGKILL');
      second?.kill('SIGKILL');
    }
  });
});

describe('a gateway killed mid-stream', () => {
  it('lets the client resume on a second gateway with nothing lost, deltas made while away included', async () => {
    const worker = await stack.spawnWorkerProcess();
    const gateway = await stack.spawnGatewayProcess();
    const remote = grpcClient(`127.0.0.1:${gateway.port}`);
    try {
      const a = new SessionStream(remote);
      a.send(startFrame());
      await a.waitForCase('sessionStarted');
      const sessionId = sessionIdOf(a);
      a.send({ $case: 'userMessage', value: { content: 'Long story [[scripted:words=120]] [[scripted:chunk_delay=25]]', messageId: 'm-long' } });
      await a.waitForCase('textDelta');
      gateway.child.kill('SIGKILL');
      expect((await a.status).code).toBe(grpc.status.UNAVAILABLE);
      const cursor = Math.max(...a.frames.map((f) => f.seq));
      // The turn goes on while nobody watches: deltas are logged after the client's cursor.
      await eventsUntil(sessionId, (e) => e.event_type === 'text_delta' && e.seq > cursor + 2);

      const b = new SessionStream(local);
      b.send(startFrame([], { sessionId, afterSeq: cursor }));
      await b.waitForCase('turnComplete');
      expect(b.frames.every((f) => f.seq > cursor && f.sessionId === sessionId)).toBe(true);
      const all = await events(sessionId);
      assertContiguous(all.map((e) => e.seq));
      const seen = [...a.of('textDelta'), ...b.of('textDelta')];
      expect(seen.map((d) => d.content).join('')).toBe(text(all));
      expect(seen.every((d) => d.messageId === 'm-long')).toBe(true);
      expect(text(all)).toContain('w108');
      b.end();
      await b.status;
    } finally {
      remote.close();
      gateway.child.kill('SIGKILL');
      worker.kill('SIGKILL');
    }
  });

  it('sends a ToolRequest still waiting for its result again to a resuming client', async () => {
    const worker = await stack.spawnWorkerProcess();
    try {
      const tools = [{ name: 'read_file', description: 'Reads a file', parametersSchema: { type: 'object', properties: { path: { type: 'string' } } } }];
      const a = new SessionStream(local);
      a.send(startFrame(tools));
      await a.waitForCase('sessionStarted');
      const sessionId = sessionIdOf(a);
      a.send({ $case: 'userMessage', value: { content: 'Read it [[scripted:call=read_file({"path":"a.txt"})]]' } });
      const request = await a.waitForCase('toolRequest');
      const cursor = Math.max(...a.frames.map((f) => f.seq));
      a.cancel();
      await a.status;
      // Parked: no worker slot is held while the client is away.
      await parkedWithNoActiveJob(sessionId);

      const b = new SessionStream(local);
      b.send(startFrame([], { sessionId, afterSeq: cursor }));
      const again = await b.waitForCase('toolRequest');
      expect(again.seq).toBe(request.seq);
      expect(again.response!.value).toEqual(request.response!.value);
      const { toolCallId } = again.response!.value as { toolCallId: string };
      b.send({ $case: 'toolResult', value: { toolCallId, success: true, result: 'file body', exitCode: 0 } });
      await b.waitForCase('turnComplete');
      expect(b.of('textDelta').map((d) => d.content).join('')).toContain('using 1 tool result(s): file body');
      b.end();
      await b.status;
    } finally {
      worker.kill('SIGKILL');
    }
  });
});

describe('client tools over StreamSession', () => {
  it('gives the model a tool error when the client never answers (the deadline is a delayed job)', async () => {
    const worker = await stack.spawnWorkerProcess();
    try {
      const s = new SessionStream(local);
      s.send(startFrame([{ name: 'ask_user', description: 'Asks the user', timeoutMs: 400 }]));
      await s.waitForCase('sessionStarted');
      s.send({ $case: 'userMessage', value: { content: 'Ask [[scripted:call=ask_user({"q":"ok?"})]]' } });
      const request = await s.waitForCase('toolRequest');
      expect(request.response!.value).toMatchObject({ toolName: 'ask_user', timeoutMs: 400 });
      await s.waitForCase('turnComplete');
      expect(s.of('textDelta').map((d) => d.content).join('')).toContain('error: the client did not answer within 400 ms');
      const all = await events(sessionIdOf(s));
      expect(all.find((e) => e.event_type === 'tool_result')!.payload).toMatchObject({ tool_name: 'ask_user', success: false, timed_out: true });
      // A late answer is refused in band.
      const { toolCallId } = request.response!.value as { toolCallId: string };
      const from = s.frames.length;
      s.send({ $case: 'toolResult', value: { toolCallId, success: true, result: 'late' } });
      expect((await s.waitFor(isCase('error'), 5000, from)).response!.value).toMatchObject({ code: 'invalid_argument' });
      s.end();
      await s.status;
    } finally {
      worker.kill('SIGKILL');
    }
  });

  it('replaces a source\'s tools with RegisterTools, and CancelTurn stops a running stream in another process', async () => {
    const worker = await stack.spawnWorkerProcess();
    try {
      const s = new SessionStream(local);
      s.send(startFrame());
      await s.waitForCase('sessionStarted');
      s.send({ $case: 'registerTools', value: { source: 'sim', tools: [{ name: 'sim__move', description: 'Moves the arm' }] } });
      s.send({ $case: 'userMessage', value: { content: 'Move [[scripted:call=sim__move({"x":1})]]' } });
      const request = await s.waitForCase('toolRequest');
      expect(request.response!.value).toMatchObject({ toolName: 'sim__move', parameters: { x: 1 } });
      const { toolCallId } = request.response!.value as { toolCallId: string };
      s.send({ $case: 'toolResult', value: { toolCallId, success: false, result: 'arm stuck', exitCode: 1 } });
      const first = await s.waitForCase('turnComplete');

      // Unregister the source: the next call to it is an unknown tool, answered on the worker with an error.
      s.send({ $case: 'registerTools', value: { source: 'sim', tools: [] } });
      const from = s.frames.indexOf(first) + 1;
      s.send({ $case: 'userMessage', value: { content: 'Move again [[scripted:call=sim__move({"x":2})]] [[scripted:words=300]] [[scripted:chunk_delay=30]]' } });
      await s.waitFor((f) => f.response?.$case === 'textDelta', 15_000, from);
      expect(s.frames.slice(from).some(isCase('toolRequest'))).toBe(false);
      expect(s.of('activityUpdate').some((a) => a.state === 'calling_tool' && a.detail === 'sim__move' && a.seq > first.seq)).toBe(true);
      // A second message during the turn is refused in band.
      s.send({ $case: 'userMessage', value: { content: 'hurry' } });
      expect((await s.waitFor(isCase('error'), 5000, from)).response!.value).toMatchObject({ code: 'turn_in_progress' });

      s.send({ $case: 'cancelTurn', value: { reason: 'enough' } });
      const done = await s.waitFor(isCase('turnComplete'), 5000, from);
      expect(done.response!.value).toMatchObject({ stopReason: 'cancelled' });
      const sessionId = sessionIdOf(s);
      // The worker's loop stopped: its job left `active`, and nothing lands after the turn's end.
      await waitUntil('no active job', async () => (await queue.getActiveCount()) === 0);
      const all = await events(sessionId);
      assertContiguous(all.map((e) => e.seq));
      expect(all.at(-1)!.event_type).toBe('turn_complete');
      expect(all.filter((e) => e.event_type === 'tool_result').map((e) => e.payload.result)).toEqual(['arm stuck', expect.stringContaining('unknown tool "sim__move"')]);
      s.send({ $case: 'cancelSession', value: { reason: 'bye' } });
      expect((await s.status).code).toBe(grpc.status.OK);
    } finally {
      worker.kill('SIGKILL');
    }
  });
});

describe('bad input over StreamSession', () => {
  it('closes a call whose first message is malformed with INVALID_ARGUMENT and writes nothing', async () => {
    const sessionKeys = async () => (await keysMatching(redis, `${stack.prefix}:{s:*`)).length;
    const before = await sessionKeys();
    const notStart = new SessionStream(local);
    notStart.send({ $case: 'userMessage', value: { content: 'hi' } });
    const s1 = await notStart.status;
    expect(s1.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(s1.details).toMatch(/first message of a session must be start/);

    const badTool = new SessionStream(local);
    badTool.send(startFrame([{ name: 'x', parametersSchema: { type: 'object', properties: 7 } }]));
    expect((await badTool.status).code).toBe(grpc.status.INVALID_ARGUMENT);

    const noWorkspace = new SessionStream(local);
    noWorkspace.send(startFrame([], { environmentId: '' }));
    expect((await noWorkspace.status).code).toBe(grpc.status.INVALID_ARGUMENT);

    const unknown = new SessionStream(local);
    unknown.send(startFrame([], { sessionId: '00000000-0000-4000-8000-000000000000' }));
    expect((await unknown.status).code).toBe(grpc.status.NOT_FOUND);

    const noKey = new SessionStream(local, null);
    noKey.send(startFrame());
    expect((await noKey.status).code).toBe(grpc.status.UNAUTHENTICATED);
    expect(await sessionKeys()).toBe(before);
  });
});

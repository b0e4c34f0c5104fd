// A roz client as Node writes one: grpc-js + @grpc/proto-loader (protobufjs) loaded from roz-oss's own
// proto/roz/v1/agent.proto (vendored unchanged in tests/fixtures/roz-oss), never from Cadre's. It must stream
// WatchTeam from a real gateway to its end and decode every field roz declares; task ids in every spelling roz
// accepts (Rust's Uuid::parse_str) must name the same task over gRPC and HTTP.
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpClient, pollUntilTerminal, TEST_API_KEY } from '@cadre/testing';
import { WORKER_PHASES, type TeamEvent } from '@cadre/protocol';
import { TestStack } from './support/stack.ts';

const ROZ_PROTO_DIR = fileURLToPath(new URL('./fixtures/roz-oss/proto', import.meta.url));

/** roz's TeamEvent as protobufjs hands it over: snake_case keys, the oneof's case name in `event`. */
type RozTeamEvent = { event?: string } & Record<string, unknown>;
type RozWatch = (request: { task_id: string }, metadata: grpc.Metadata) => grpc.ClientReadableStream<RozTeamEvent>;

function rozAgentClient(target: string): grpc.Client & { WatchTeam: RozWatch } {
  // The options a roz Node client would pass: roz's field names, 64-bit numbers as strings, defaults filled in.
  const definition = loadSync('roz/v1/agent.proto', { includeDirs: [ROZ_PROTO_DIR], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true });
  const roz = grpc.loadPackageDefinition(definition) as unknown as { roz: { v1: { AgentService: grpc.ServiceClientConstructor } } };
  return new roz.roz.v1.AgentService(target, grpc.credentials.createInsecure()) as unknown as grpc.Client & { WatchTeam: RozWatch };
}

function rozWatch(client: { WatchTeam: RozWatch }, taskId: string): Promise<{ events: RozTeamEvent[]; status: grpc.StatusObject }> {
  return new Promise((resolve) => {
    const metadata = new grpc.Metadata();
    metadata.set('authorization', `Bearer ${TEST_API_KEY}`);
    const events: RozTeamEvent[] = [];
    const call = client.WatchTeam({ task_id: taskId }, metadata);
    call.on('data', (e: RozTeamEvent) => events.push(e));
    // A decode failure (e.g. "invalid wire type") surfaces here as an error status, and fails the test.
    call.on('error', (err: grpc.ServiceError) => resolve({ events, status: err }));
    call.on('status', (status: grpc.StatusObject) => {
      if (status.code === grpc.status.OK) resolve({ events, status });
    });
  });
}

/** What roz's codec must make of one of our logged events: exactly roz's fields, nothing of Cadre's additions. */
function asRozSees(taskId: string, e: TeamEvent): RozTeamEvent {
  const worker_id = e.worker_id ?? '';
  switch (e.event_type) {
    case 'worker_started':
      return { event: 'worker_started', worker_started: { worker_id, host_id: e.payload.host_id } };
    case 'worker_phase':
      return { event: 'worker_phase', worker_phase: { worker_id, phase: WORKER_PHASES.indexOf(e.payload.phase), mode: e.payload.mode } };
    case 'worker_tool_call':
      return { event: 'worker_tool_call', worker_tool_call: { worker_id, tool: e.payload.tool } };
    case 'worker_completed':
      return { event: 'worker_completed', worker_completed: { worker_id, result: e.payload.result } };
    case 'worker_failed':
      return { event: 'worker_failed', worker_failed: { worker_id, reason: e.payload.reason } };
    case 'worker_exited':
      expect(e.payload.parent_task_id).toBe(taskId);
      return { event: 'worker_exited', worker_exited: { worker_id, parent_task_id: e.payload.parent_task_id } };
    case 'worker_approval_requested': {
      const { approval_id, tool_name, reason, timeout_secs } = e.payload;
      return { event: 'worker_approval_requested', worker_approval_requested: { worker_id, task_id: taskId, approval_id, tool_name, reason, timeout_secs: String(timeout_secs) } };
    }
    case 'worker_approval_resolved':
      return { event: 'worker_approval_resolved', worker_approval_resolved: { worker_id, task_id: taskId, approval_id: e.payload.approval_id, approved: e.payload.approved } };
    case 'task_queued':
    case 'task_completed':
    case 'task_failed':
    case 'task_cancelled':
      // Cadre's task_status_changed (tag 21) and envelope (16–20) are unknown to roz: skipped, an empty message.
      return {};
  }
}

let stack: TestStack;
let roz: ReturnType<typeof rozAgentClient>;

beforeAll(async () => {
  stack = await TestStack.start();
  roz = rozAgentClient(stack.grpcTarget);
});
afterAll(async () => {
  roz?.close();
  await stack?.stop();
});

async function createTask(body: Record<string, unknown>): Promise<string> {
  const res = await httpClient(stack.url).post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: 'roz', ...body });
  expect(res.status).toBe(201);
  return res.body.task.task_id;
}

describe("WatchTeam through roz's own schema and protobufjs", () => {
  it('streams a planned team live to its end; every roz field decodes (phase as roz\'s uint32)', async () => {
    // A lead that plans (spawn_worker), waits for its workers, then synthesizes: all three phases appear.
    const taskId = await createTask({ goal: 'Compare two options [[scripted:spawn=pro,con]] [[scripted:delay=100]]' });
    const { events, status } = await rozWatch(roz, taskId);
    expect(status.code).toBe(grpc.status.OK);
    const logged = await pollUntilTerminal(stack.url, taskId);
    expect(logged.at(-1)!.event_type).toBe('task_completed');
    expect(events).toEqual(logged.map((e) => asRozSees(taskId, e)));

    const phases = events.filter((e) => e.event === 'worker_phase').map((e) => e.worker_phase as { worker_id: string; phase: number; mode: string });
    expect(phases.every((p) => typeof p.phase === 'number')).toBe(true);
    expect([...new Set(phases.filter((p) => p.worker_id === 'lead').map((p) => p.phase))]).toEqual([0, 1, 2]);
    expect(new Set(phases.filter((p) => p.worker_id !== 'lead').map((p) => p.phase))).toEqual(new Set([0]));
  });

  it('decodes tool calls and failures of a named team', async () => {
    const taskId = await createTask({
      goal: 'Use a tool',
      team: {
        workers: [
          { role: 'calc', instructions: 'Compute. [[scripted:call=calculate({"expression":"6*7"})]]', tools: ['calculate'] },
          { role: 'broken', instructions: 'Fail. [[scripted:fail=400]]' },
        ],
      },
    });
    const { events, status } = await rozWatch(roz, taskId);
    expect(status.code).toBe(grpc.status.OK);
    const logged = await pollUntilTerminal(stack.url, taskId);
    expect(events).toEqual(logged.map((e) => asRozSees(taskId, e)));
    expect(events.map((e) => e.event)).toEqual(expect.arrayContaining(['worker_tool_call', 'worker_failed', 'worker_completed']));
    expect(events.find((e) => e.event === 'worker_tool_call')!.worker_tool_call).toEqual({ worker_id: 'calc-1', tool: 'calculate' });
  });
});

describe('task ids in every spelling roz accepts', () => {
  let taskId: string;
  let logged: TeamEvent[];
  const spellings = (id: string) => ({
    'upper case': id.toUpperCase(),
    'no hyphens': id.replaceAll('-', ''),
    'no hyphens, upper case': id.replaceAll('-', '').toUpperCase(),
    braces: `{${id}}`,
    'urn:uuid:': `urn:uuid:${id}`,
  });

  beforeAll(async () => {
    taskId = await createTask({ goal: 'Spell me', team: { workers: [{ role: 'solo' }] } });
    logged = await pollUntilTerminal(stack.url, taskId);
  });

  it('gRPC: each spelling streams the same task', async () => {
    const canonical = await rozWatch(roz, taskId);
    expect(canonical.status.code).toBe(grpc.status.OK);
    for (const [form, id] of Object.entries(spellings(taskId))) {
      const { events, status } = await rozWatch(roz, id);
      expect(status.code, form).toBe(grpc.status.OK);
      expect(events, form).toEqual(canonical.events);
    }
  });

  it('gRPC: spellings roz refuses are INVALID_ARGUMENT, an unknown id in any spelling NOT_FOUND', async () => {
    for (const id of [`{${taskId.replaceAll('-', '')}}`, `URN:UUID:${taskId}`, `${taskId} `, `${taskId}0`]) {
      const { status } = await rozWatch(roz, id);
      expect(status.code, id).toBe(grpc.status.INVALID_ARGUMENT);
      expect(status.details).toMatch(/task_id must be a UUID/);
    }
    const unknown = '7C0A5D4E-0000-4000-8000-00000000AB12';
    expect((await rozWatch(roz, unknown)).status.code).toBe(grpc.status.NOT_FOUND);
  });

  it('HTTP: each spelling reads, pages, streams and cancels the same task, and answers quote the canonical id', async () => {
    const api = httpClient(stack.url);
    for (const [form, id] of Object.entries(spellings(taskId))) {
      const path = `/api/tasks/${encodeURIComponent(id)}`;
      const task = await api.get<{ task: { task_id: string } }>(path);
      expect(task.status, form).toBe(200);
      expect(task.body.task.task_id, form).toBe(taskId);

      const page = await api.get<{ task_id: string; events: TeamEvent[] }>(`${path}/events?after_seq=0&limit=1000`);
      expect(page.status, form).toBe(200);
      expect(page.body.task_id, form).toBe(taskId);
      expect(page.body.events, form).toEqual(logged);

      const sse = await fetch(`${stack.url}${path}/stream?after_seq=${logged.length - 1}`, { headers: { authorization: `Bearer ${TEST_API_KEY}` } });
      expect(sse.status, form).toBe(200);
      expect(await sse.text(), form).toContain(`id: ${logged.length}\n`);

      // The task completed, so cancel is the documented 409 (not a 400 for the spelling, nor a 404).
      const cancel = await api.post<{ error: { code: string; message: string } }>(`${path}/cancel`);
      expect(cancel.status, form).toBe(409);
      expect(cancel.body.error.message, form).toContain(taskId);
    }
  });

  it('HTTP: spellings roz refuses are 400, an unknown id in any spelling 404', async () => {
    const api = httpClient(stack.url);
    for (const id of [`{${taskId.replaceAll('-', '')}}`, `URN:UUID:${taskId}`, `${taskId}0`]) {
      const res = await api.get<{ error: { code: string; message: string } }>(`/api/tasks/${encodeURIComponent(id)}`);
      expect(res.status, id).toBe(400);
      expect(res.body.error.message).toMatch(/task_id must be a UUID/);
    }
    const unknown = await api.get<{ error: { code: string } }>(`/api/tasks/${encodeURIComponent('{7C0A5D4E-0000-4000-8000-00000000AB12}')}`);
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe('not_found');
  });
});

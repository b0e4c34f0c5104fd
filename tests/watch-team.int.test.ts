import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertContiguous, grpcClient, httpClient, pollUntilTerminal, TEST_API_KEY, waitUntil, watchTeam } from '@cadre/testing';
import type { AgentServiceClient } from '@cadre/protocol';
import { TestStack } from './support/stack.ts';

let stack: TestStack;
let client: AgentServiceClient;
let second: AgentServiceClient;

beforeAll(async () => {
  stack = await TestStack.start({ gateways: 2, workers: 1 });
  client = grpcClient(stack.grpcTarget);
  second = grpcClient(`127.0.0.1:${stack.gateways[1]!.port}`);
});
afterAll(async () => {
  client?.close();
  second?.close();
  await stack?.stop();
});

async function createTask(goal: string, workers = [{ role: 'researcher' }, { role: 'critic' }]): Promise<string> {
  const res = await httpClient(stack.url).post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: 'watch', goal, team: { workers } });
  expect(res.status).toBe(201);
  return res.body.task.task_id;
}

describe('WatchTeam over a real gRPC client', () => {
  it('streams a live task from the start, in seq order, and ends after the terminal event', async () => {
    // Slow model calls so the watch starts while the task is still running.
    const taskId = await createTask('Weigh two options [[scripted:delay=150]]');
    const { events, status } = await watchTeam(client, { taskId });
    expect(status.code).toBe(grpc.status.OK);
    assertContiguous(events.map((e) => e.seq));
    const variant = (e: (typeof events)[number]) => e.event!;
    expect(variant(events[0]!)).toMatchObject({ $case: 'taskStatusChanged', value: { status: 'queued' } });
    expect(variant(events.at(-1)!)).toMatchObject({ $case: 'taskStatusChanged', value: { status: 'completed' } });
    expect(events.every((e) => e.taskId === taskId)).toBe(true);
    // roz's oneof variants carry the worker ids.
    const started = events.map(variant).filter((v) => v.$case === 'workerStarted');
    expect(started.map((v) => (v.value as { workerId: string }).workerId).sort()).toEqual(['critic-2', 'lead', 'researcher-1']);
    const exited = events.map(variant).filter((v) => v.$case === 'workerExited');
    expect(exited).toHaveLength(3);
    expect(exited.every((v) => (v.value as { parentTaskId: string }).parentTaskId === taskId)).toBe(true);

    // gRPC and HTTP polling serve the same events with the same seq.
    const polled = await pollUntilTerminal(stack.url, taskId);
    expect(events.map((e) => [e.seq, e.eventType])).toEqual(polled.map((e) => [e.seq, e.event_type]));
  });

  it('resumes from any cursor with no gaps and no duplicates', async () => {
    const taskId = await createTask('Resume me');
    const all = await pollUntilTerminal(stack.url, taskId);
    for (const after of [0, 1, 5, all.length - 1]) {
      const { events, status } = await watchTeam(client, { taskId, afterSeq: after });
      expect(status.code).toBe(grpc.status.OK);
      expect(events.map((e) => e.seq)).toEqual(all.filter((e) => e.seq > after).map((e) => e.seq));
    }
    // A reader that already has the terminal event gets an empty stream that ends at once.
    const done = await watchTeam(client, { taskId, afterSeq: all.length });
    expect(done.status.code).toBe(grpc.status.OK);
    expect(done.events).toEqual([]);
  });

  it('serves the same stream identically from two gateway processes', async () => {
    const taskId = await createTask('Two gateways [[scripted:delay=100]]');
    const [a, b] = await Promise.all([watchTeam(client, { taskId }), watchTeam(second, { taskId })]);
    expect(a.status.code).toBe(grpc.status.OK);
    expect(b.status.code).toBe(grpc.status.OK);
    expect(a.events.length).toBeGreaterThan(10);
    expect(b.events).toEqual(a.events);
  });

  it('answers bad requests with clear statuses', async () => {
    const taskId = await createTask('Statuses');
    await pollUntilTerminal(stack.url, taskId);
    const bad = await watchTeam(client, { taskId: 'not-a-uuid' });
    expect(bad.status.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(bad.status.details).toMatch(/task_id must be a UUID/);
    const missing = await watchTeam(client, { taskId: '00000000-0000-4000-8000-000000000000' });
    expect(missing.status.code).toBe(grpc.status.NOT_FOUND);
    const noKey = await watchTeam(client, { taskId }, null);
    expect(noKey.status.code).toBe(grpc.status.UNAUTHENTICATED);
    const wrongKey = await watchTeam(client, { taskId }, 'wrong');
    expect(wrongKey.status.code).toBe(grpc.status.UNAUTHENTICATED);
    const ahead = await watchTeam(client, { taskId, afterSeq: 10_000 });
    expect(ahead.status.code).toBe(grpc.status.OUT_OF_RANGE);
  });

  it('refuses a cursor older than the retained log (OUT_OF_RANGE / 410), never a silent gap', async () => {
    // A second stack whose logs keep only 100 events; a worker calling a tool 60 times writes more than that.
    const small = await TestStack.start({ env: { CADRE_MAX_EVENTS_PER_TASK: '100', CADRE_MAX_TURNS: '80' } });
    const c = grpcClient(small.grpcTarget);
    try {
      const calls = Array.from({ length: 60 }, () => '[[scripted:call=current_time()]]').join(' ');
      const res = await httpClient(small.url).post<{ task: { task_id: string } }>('/api/tasks', {
        workspace_id: 'watch', goal: 'Long log', team: { workers: [{ role: 'clock', instructions: calls, tools: ['current_time'] }] },
      });
      const taskId = res.body.task.task_id;
      const last = await waitUntil('the long task to complete', async () => {
        const t = await httpClient(small.url).get<{ task: { status: string; last_seq: number } }>(`/api/tasks/${taskId}`);
        return t.body.task.status === 'completed' && t.body.task.last_seq;
      });
      expect(last).toBeGreaterThan(100);
      const tail = await watchTeam(c, { taskId, afterSeq: 0 });
      expect(tail.status.code).toBe(grpc.status.OUT_OF_RANGE);
      expect(tail.status.details).toMatch(/older than the retained log/);
      expect(tail.events).toEqual([]);
      const oldest = last - 99;
      const polled = await httpClient(small.url).get<{ error: { code: string } }>(`/api/tasks/${taskId}/events?after_seq=${oldest - 2}`);
      expect(polled.status).toBe(410);
      expect(polled.body.error.code).toBe('out_of_range');
      const fromOldest = await watchTeam(c, { taskId, afterSeq: oldest - 1 });
      expect(fromOldest.status.code).toBe(grpc.status.OK);
      expect(fromOldest.events.map((e) => e.seq)).toEqual(Array.from({ length: 100 }, (_, i) => oldest + i));
    } finally {
      c.close();
      await small.stop();
    }
  });
});

describe('gateway drain', () => {
  it('ends open streams with a resumable UNAVAILABLE on shutdown; another gateway resumes from the cursor', async () => {
    const leaving = await stack.addGateway();
    const c = grpcClient(`127.0.0.1:${leaving.port}`);
    try {
      const taskId = await createTask('Outlive the gateway [[scripted:delay=400]]');
      let firstEvent!: () => void;
      const receiving = new Promise<void>((resolve) => (firstEvent = resolve));
      const watching = watchTeam(c, { taskId }, TEST_API_KEY, () => firstEvent());
      await receiving; // the stream is open and live before the gateway leaves
      await leaving.close();
      const cut = await watching;
      expect(cut.status.code).toBe(grpc.status.UNAVAILABLE);
      expect(cut.status.details).toMatch(/shutting down/);
      const cursor = cut.events.at(-1)?.seq ?? 0;
      const rest = await watchTeam(client, { taskId, afterSeq: cursor });
      expect(rest.status.code).toBe(grpc.status.OK);
      assertContiguous([...cut.events, ...rest.events].map((e) => e.seq));
      expect(rest.events.at(-1)!.event!.$case).toBe('taskStatusChanged');
    } finally {
      c.close();
      stack.gateways = stack.gateways.filter((g) => g !== leaving);
    }
  });
});

describe('SSE', () => {
  it('streams with id = seq, honours Last-Event-ID, and closes after the terminal event', async () => {
    const taskId = await createTask('SSE please [[scripted:delay=100]]');
    const read = async (headers: Record<string, string>): Promise<{ ids: number[]; types: string[] }> => {
      const res = await fetch(`${stack.url}/api/tasks/${taskId}/stream`, { headers: { authorization: `Bearer test-key-all-workspaces`, ...headers } });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const text = await res.text(); // resolves only when the server closes the stream
      const frames = text.split('\n\n').filter((f) => f.includes('id: '));
      return {
        ids: frames.map((f) => Number(/^id: (\d+)$/m.exec(f)![1])),
        types: frames.map((f) => /^event: (\S+)$/m.exec(f)![1]!),
      };
    };
    const full = await read({});
    assertContiguous(full.ids);
    expect(full.types.at(-1)).toBe('task_completed');
    const resumed = await read({ 'last-event-id': '4' });
    expect(resumed.ids).toEqual(full.ids.filter((id) => id > 4));
    // A reader that already has the terminal event gets 204, which tells EventSource to stop reconnecting.
    const done = await fetch(`${stack.url}/api/tasks/${taskId}/stream`, { headers: { authorization: 'Bearer test-key-all-workspaces', 'last-event-id': String(full.ids.at(-1)) } });
    expect(done.status).toBe(204);
    expect(await done.text()).toBe('');
  });
});

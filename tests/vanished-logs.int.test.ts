import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_API_KEY, grpcClient, httpClient, keysMatching, watchTeam, type TestRedisClient } from '@cadre/testing';
import type { AgentServiceClient } from '@cadre/protocol';
import { TestStack } from './support/stack.ts';
import { SessionStream, isCase } from './support/session-client.ts';
import { readSse } from './support/sse.ts';

// A log whose keys vanish while it is watched (a session expired, a task evicted, either lost in a failover) ends
// its watchers on the gateway's next safety poll (2 s), each edge the way its clients expect a missing log; before,
// they waited for ever. No worker: tasks stay queued and sessions idle, so only the vanishing ends a watch.
let stack: TestStack;
let redis: TestRedisClient;
let client: AgentServiceClient;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 0 });
  redis = stack.redis.connect();
  client = grpcClient(stack.grpcTarget);
});
afterAll(async () => {
  client?.close();
  redis?.disconnect();
  await stack?.stop();
});

async function queuedTask(): Promise<string> {
  const res = await httpClient(stack.url).post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: 'vanish', goal: 'Wait for a worker' });
  expect(res.status).toBe(201);
  return res.body.task.task_id;
}

/** Deletes every key of the log's hash tag (`t:<id>`, `s:<id>`), as retention or a lost failover would. */
async function vanish(tag: string): Promise<void> {
  const keys = await keysMatching(redis, `${stack.prefix}:{${tag}}:*`);
  expect(keys.length).toBeGreaterThan(0);
  await redis.del(...keys);
}

describe('a watched log whose keys vanish', () => {
  it('WatchTeam ends NOT_FOUND, saying the log no longer exists', async () => {
    const taskId = await queuedTask();
    let watching!: () => void;
    const opened = new Promise<void>((resolve) => (watching = resolve));
    const watch = watchTeam(client, { taskId }, undefined, () => watching());
    await opened;
    await vanish(`t:${taskId}`);
    const { events, status } = await watch;
    expect(events.length).toBeGreaterThan(0);
    expect(status.code).toBe(grpc.status.NOT_FOUND);
    expect(status.details).toMatch(/no longer exists/);
  });

  it('an SSE stream sends an error event (not_found, with the last seq sent) and ends; its reconnect is a 404', async () => {
    const taskId = await queuedTask();
    const url = `${stack.url}/api/tasks/${taskId}/stream`;
    let vanishing: Promise<void> | undefined;
    const { seqs, error } = await readSse(url, 0, { onEvent: () => void (vanishing ??= vanish(`t:${taskId}`)) });
    await vanishing;
    expect(seqs.length).toBeGreaterThan(0);
    expect(error).toMatchObject({ code: 'not_found', last_seq: seqs.at(-1), message: expect.stringMatching(/no longer exists/) });
    // What EventSource does next: reconnect with Last-Event-ID, get a 404, and stop.
    const again = await fetch(url, { headers: { authorization: `Bearer ${TEST_API_KEY}`, 'last-event-id': String(seqs.at(-1)) } });
    expect(again.status).toBe(404);
  });

  it('a StreamSession resume of a session whose keys expire ends NOT_FOUND, as a resume of an unknown session does', async () => {
    const first = new SessionStream(client);
    first.send({ $case: 'start', value: { environmentId: 'vanish' } });
    const started = await first.waitForCase('sessionStarted');
    const sessionId = (started.response!.value as { sessionId: string }).sessionId;
    first.end();
    // Resumed from the start, so its first frame shows its watch is open before the keys go.
    const resumed = new SessionStream(client);
    resumed.send({ $case: 'start', value: { environmentId: 'vanish', sessionId, afterSeq: 0 } });
    await resumed.waitFor(isCase('sessionStarted'));
    for (const key of await keysMatching(redis, `${stack.prefix}:{s:${sessionId}}:*`)) await redis.pexpire(key, 1);
    const status = await resumed.status;
    expect(status.code).toBe(grpc.status.NOT_FOUND);
    expect(status.details).toMatch(/no longer exists/);
  });
});

// CADRE_GRPC_MAX_CONCURRENT_STREAMS bounds the calls one HTTP/2 connection has open, as a real grpc-js client meets
// it: the gateway advertises the bound in its SETTINGS, so the client holds a call beyond it (it never reaches the
// gateway) until one of its calls on that connection ends.
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentServiceClient, type TeamEventProto } from '@cadre/protocol';
import { TEST_API_KEY, httpClient, waitUntil } from '@cadre/testing';
import { Scrape } from './support/prometheus.ts';
import { TestStack } from './support/stack.ts';

const LIMIT = 3;
let stack: TestStack;
const clients: AgentServiceClient[] = [];

beforeAll(async () => {
  // No worker pool: every task stays queued, so its WatchTeam call stays open until the task is cancelled.
  stack = await TestStack.start({ workers: 0, env: { CADRE_GRPC_MAX_CONCURRENT_STREAMS: String(LIMIT) } });
});
afterAll(async () => {
  for (const client of clients) client.close();
  await stack?.stop();
});

/** A channel on a connection of its own (grpc-js otherwise shares one connection among clients of a target). */
function ownConnection(): AgentServiceClient {
  const client = new AgentServiceClient(stack.grpcTarget, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
  clients.push(client);
  return client;
}

async function createTask(): Promise<string> {
  const res = await httpClient(stack.url).post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: 'limits', goal: 'Wait for a worker' });
  expect(res.status).toBe(201);
  return res.body.task.task_id;
}

interface Watch {
  call: grpc.ClientReadableStream<TeamEventProto>;
  events: TeamEventProto[];
  ended: Promise<grpc.StatusObject>;
}

function watch(client: AgentServiceClient, taskId: string): Watch {
  const metadata = new grpc.Metadata();
  metadata.set('authorization', `Bearer ${TEST_API_KEY}`);
  const call = client.watchTeam({ taskId, afterSeq: 0 }, metadata);
  const events: TeamEventProto[] = [];
  call.on('data', (e: TeamEventProto) => events.push(e));
  // 'error' carries every status but OK; a listener also keeps an error status from being thrown.
  const ended = new Promise<grpc.StatusObject>((resolve) => {
    call.on('error', (err: grpc.ServiceError) => resolve(err));
    call.on('status', (status: grpc.StatusObject) => status.code === grpc.status.OK && resolve(status));
  });
  return { call, events, ended };
}

const served = (w: Watch) => waitUntil('the watch to get its task\'s first event', () => w.events.length > 0);

/** WatchTeam calls the gateway has started, from its /metrics. */
async function watchesStarted(): Promise<number> {
  return (await Scrape.of(`${stack.url}/metrics`)).value('cadre_grpc_server_started_total', { grpc_method: 'roz.v1.AgentService/WatchTeam' });
}

/**
 * Proof that a call sent earlier on `client`'s connection did not reach the gateway: a watch on another
 * connection, opened after it, is served, and the gateway has started only the calls counted so far plus that one.
 */
async function heldByClient(taskId: string, startedBefore: number): Promise<void> {
  const probe = watch(ownConnection(), taskId);
  await served(probe);
  expect(await watchesStarted()).toBe(startedBefore + 1);
  probe.call.cancel();
  await probe.ended;
}

describe('gRPC calls per connection (CADRE_GRPC_MAX_CONCURRENT_STREAMS)', () => {
  it('a call beyond the bound waits in the client while the others hold, and is served once one ends', async () => {
    const tasks = await Promise.all(Array.from({ length: LIMIT + 2 }, createTask));
    const client = ownConnection();
    const before = await watchesStarted();

    const open = tasks.slice(0, LIMIT).map((taskId) => watch(client, taskId));
    for (const w of open) await served(w);
    const beyond = watch(client, tasks[LIMIT]!);
    await heldByClient(tasks[LIMIT]!, before + LIMIT);
    expect(beyond.events).toEqual([]);

    // The gateway ends one of the connection's calls (its task's terminal event): the waiting call goes out and is served.
    expect((await httpClient(stack.url).post(`/api/tasks/${tasks[0]}/cancel`)).status).toBe(200);
    expect((await open[0]!.ended).code).toBe(grpc.status.OK);
    await served(beyond);
    expect(beyond.events[0]!.taskId).toBe(tasks[LIMIT]);

    // What is true of Node's HTTP/2 server (Node 24, grpc-js 1.14): when the client frees the slot by cancelling a
    // call, it sends the cancel and the waiting call together, and the server, still counting the cancelled stream,
    // refuses the waiting one with ENHANCE_YOUR_CALM: the client sees RESOURCE_EXHAUSTED and must retry it.
    const next = watch(client, tasks[LIMIT + 1]!);
    await heldByClient(tasks[LIMIT + 1]!, before + LIMIT + 2);
    open[1]!.call.cancel();
    expect((await next.ended).code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    const retried = watch(client, tasks[LIMIT + 1]!);
    await served(retried);

    for (const w of [open[2]!, beyond, retried]) w.call.cancel();
  });
});

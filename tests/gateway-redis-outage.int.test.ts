// The gateway answers while its Redis (one node) is down: 503 `unavailable` / gRPC UNAVAILABLE, which clients retry,
// rather than holding every request for the whole outage; once Redis is back it serves again. A password changed
// under it (a rotation: its connections' credentials refused) is answered the same way, not as a 500.
import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { grpcClient, httpClient, runsCall, startRestartableRedis, waitUntil, watchTeam, type RestartableRedis } from '@cadre/testing';
import { TestStack } from './support/stack.ts';

const RUNS_KEY = 'runs-key-outage';
const NEW_PASSWORD = 'rotated-pw';

let stack: TestStack | undefined;
let redis: RestartableRedis | undefined;
let redisDown = false;
let passwordSet = false;

afterEach(async () => {
  // The gateway's close needs a Redis that lets it in.
  if (redisDown) await redis?.restart();
  redisDown = false;
  if (passwordSet) {
    const admin = new Redis(redis!.url, { password: NEW_PASSWORD });
    await admin.config('SET', 'requirepass', '');
    admin.disconnect();
  }
  passwordSet = false;
  await stack?.stop();
  stack = undefined;
});

async function startStack(): Promise<{ api: ReturnType<typeof httpClient>; taskId: string }> {
  redis = await startRestartableRedis();
  stack = await TestStack.start({ redis, workers: 0, env: { RUNS_API_KEY: RUNS_KEY } });
  const api = httpClient(stack.url);
  const created = await api.post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: 'outage', goal: 'Be there', team: { workers: [{ role: 'a', instructions: 'x' }] } });
  expect(created.status).toBe(201);
  return { api, taskId: created.body.task.task_id };
}

/** A task read, a task list, a VM agent's heartbeat (the heartbeat connection) and WatchTeam, all at once. */
async function callEach(api: ReturnType<typeof httpClient>, taskId: string) {
  const [task, list, heartbeat, watch] = await Promise.all([
    api.get(`/api/tasks/${taskId}`),
    api.get('/api/tasks?workspace_id=outage'),
    runsCall(stack!.url, RUNS_KEY, 'POST', '/api/runs/workers/heartbeat', { workspace_id: 'outage', worker_id: 'vm-1', status: 'ready', acked_command_ids: [] }),
    watchTeam(grpcClient(stack!.grpcTarget), { taskId }),
  ]);
  return { task, list, heartbeat, watch };
}

function expectUnavailable(answers: Awaited<ReturnType<typeof callEach>>): void {
  for (const res of [answers.task, answers.list]) {
    expect(res.status).toBe(503);
    expect(res.body).toMatchObject({ error: { code: 'unavailable' } });
  }
  expect(answers.heartbeat.status).toBe(503);
  expect(answers.watch.status.code).toBe(grpc.status.UNAVAILABLE);
}

describe('the gateway while its Redis (one node) cannot answer', () => {
  it('Redis down: 503 unavailable and UNAVAILABLE, not a wait for the whole outage; served again once Redis is back', async () => {
    const { api, taskId } = await startStack();
    redis!.kill();
    redisDown = true;
    expectUnavailable(await callEach(api, taskId));

    await redis!.restart();
    redisDown = false;
    await waitUntil('the gateway to serve the task again', async () => (await api.get(`/api/tasks/${taskId}`)).status === 200);
    expect((await api.get('/api/tasks?workspace_id=outage')).status).toBe(200);
  }, 90_000);

  it('its password changed under it (CONFIG SET requirepass, connections re-authenticating): 503 unavailable, not 500', async () => {
    const { api, taskId } = await startStack();
    const admin = new Redis(redis!.url);
    await admin.config('SET', 'requirepass', NEW_PASSWORD);
    passwordSet = true;
    // What a rotation does to a connection sooner or later: it reconnects, and is refused.
    await admin.call('AUTH', NEW_PASSWORD);
    await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
    admin.disconnect();
    expectUnavailable(await callEach(api, taskId));
  }, 90_000);
});

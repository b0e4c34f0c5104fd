// Redis commands a team task costs in the store (issue 7: Cadre made about twice the Redis calls of a raw BullMQ
// flow). Counted by the server itself, for the store's connection only (commandsOf: MONITOR, commands run inside
// Lua included, as INFO commandstats and the overhead bench count them), so the figures are exact whatever else
// runs on the server. A cut lowers them: update the figure and
// say what changed. A rise is a regression unless a new guarantee pays for it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { commandsOf, startTestRedis, type TestRedis } from '@cadre/testing';
import { KeyBuilder, TaskStore } from '@cadre/store';

let server: TestRedis;
let redis: Redis;
let admin: Redis;
let store: TaskStore;

beforeAll(async () => {
  server = await startTestRedis();
  redis = new Redis(server.url);
  admin = new Redis(server.url);
  store = new TaskStore({ redis, keys: new KeyBuilder(`cmds${process.pid}`) });
});
afterAll(async () => {
  redis?.disconnect();
  admin?.disconnect();
  await server?.stop();
});

const usage = { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 };
const team = { lead: { instructions: 'lead' }, workers: [{ role: 'writer', instructions: 'write', tools: [] }], max_workers: 4 };

/** The store's calls for a one-worker named team, step by step, as the gateway and the worker make them. */
async function runTask(measure: (step: () => Promise<unknown>) => Promise<unknown>): Promise<void> {
  let taskId = '';
  await measure(async () => {
    const { task } = await store.createTask({ workspace_id: 'w', goal: 'g', team, metadata: {} });
    taskId = task.task_id;
    await Promise.all([store.listNew(task), store.enqueued(taskId)]);
  });
  await measure(async () => {
    // As the agent job processor does: the loop's turn 1 appends its phase unless the claim did.
    const phase = { phase: 'thinking', mode: 'react', turn: 1 } as const;
    const claim = await store.claimWorker(taskId, 'writer-1', 'W', 'h', phase);
    if (!claim.firstPhaseLogged) await store.appendWorkerEvent(taskId, 'writer-1', 'W', 'worker_phase', phase);
    await store.finishWorker(taskId, 'writer-1', 'W', { outcome: 'completed', result: 'draft', usage });
  });
  await measure(async () => {
    await store.claimWorker(taskId, 'lead', 'L', 'h');
    await store.appendWorkerEvent(taskId, 'lead', 'L', 'worker_phase', { phase: 'synthesizing', mode: 'react', turn: 1 });
    await store.finishWorker(taskId, 'lead', 'L', { outcome: 'completed', result: 'done', usage }, { status: 'completed', result: 'done', usage }, 'w');
  });
}

describe('Redis commands per team task (store)', () => {
  it('a one-worker named team, from creation to the task end', async () => {
    // Once before counting: the store's first call on a server is an FCALL refused (no library yet), then its load.
    await runTask((step) => step());
    const counts: number[] = [];
    await runTask(async (step) => counts.push(Object.values(await commandsOf(admin, redis, step)).reduce((a, b) => a + b, 0)));
    const steps = { create: counts[0], worker: counts[1], lead: counts[2] };
    // create: the enqueue mark and its removal (2), createTask (9: FCALL, EXISTS, TIME, an HSET for the meta and
    // one for the roster, the task_queued append's HINCRBY, XADD, SPUBLISH, HSET of updated_at), the listing
    // (indexTask 5, SADD of the workspace, HINCRBY of the stats). worker: claim 15 (with its parked read and its
    // first phase's append), finish 13. lead: claim 10 (with the roster), append 8, finish with the task's end 21,
    // then the stats and the unfinished set (2). Each append sets the task's updated_at (one HSET in its script): a
    // task that moves is never checked by read repair (apps/gateway/src/tasks/read-repair.ts).
    expect(steps).toEqual({ create: 18, worker: 28, lead: 41 });
  });
});

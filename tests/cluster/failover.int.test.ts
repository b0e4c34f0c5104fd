// A master of the Redis Cluster dies (kill -9) while team tasks run and are watched: its replica takes over, and
// every task still ends, each log contiguous, and every watcher (resuming after an error with its last seq, as a
// client does) has seen each event exactly once. The tests start clusters of their own, since they kill masters.
//
// Redis replicates asynchronously: a write the master acknowledged but had not yet sent to its replica is gone
// after the failover. The first test takes that out of the picture (writes paused and the replica caught up before
// the kill) to check what the code guarantees; the second kills the master with writes in flight and reports what
// the watchers saw that the surviving log does not hold.
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import type { TeamEventProto } from '@cadre/protocol';
import { KeyBuilder } from '@cadre/store';
import { assertContiguous, grpcClient, killNode, pollUntilTerminal, startTestCluster, waitForEvent, watchTeam, type TestCluster } from '@cadre/testing';
import { TestStack } from '../support/stack.ts';

const TASKS = 6;
const TERMINAL = new Set(['task_completed', 'task_failed', 'task_cancelled']);
let stack: TestStack | undefined;

afterEach(async () => {
  await stack?.stop();
  stack = undefined;
});

/** Watches a task to its end over gRPC WatchTeam, resuming after any error from the last seq it received. */
async function watchToEnd(target: string, taskId: string): Promise<{ events: TeamEventProto[]; resumes: number }> {
  const events: TeamEventProto[] = [];
  let resumes = 0;
  const client = grpcClient(target);
  try {
    while (!events.some((e) => TERMINAL.has(e.eventType))) {
      const afterSeq = events.at(-1)?.seq ?? 0;
      const { events: more } = await watchTeam(client, { taskId, afterSeq });
      events.push(...more);
      if (!TERMINAL.has(more.at(-1)?.eventType ?? '')) {
        resumes++;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  } finally {
    client.close();
  }
  return { events, resumes };
}

/** Starts team tasks that run for several seconds (two workers, then the lead; each model answer takes 1.5 s). */
async function startTasks(cluster: TestCluster): Promise<{ taskIds: string[]; watches: Promise<{ events: TeamEventProto[]; resumes: number }>[] }> {
  stack = await TestStack.start({ redis: cluster, workers: 2 });
  const taskIds: string[] = [];
  for (let i = 0; i < TASKS; i++) {
    const res = await fetch(`${stack.url}/api/tasks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${'test-key-all-workspaces'}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        workspace_id: 'failover',
        goal: `Task ${i} [[scripted:delay=1500]]`,
        team: { workers: [{ role: 'pro', instructions: 'Pros.' }, { role: 'con', instructions: 'Cons.' }] },
      }),
    });
    expect(res.status).toBe(201);
    taskIds.push(((await res.json()) as { task: { task_id: string } }).task.task_id);
  }
  const watches = taskIds.map((id) => watchToEnd(stack!.grpcTarget, id));
  // Mid-task: every worker of every task has started (and is waiting on its model answer).
  for (const id of taskIds) {
    await waitForEvent(stack.url, id, (e) => e.event_type === 'worker_started' && e.worker_id === 'con-2', 30_000);
    await waitForEvent(stack.url, id, (e) => e.event_type === 'worker_started' && e.worker_id === 'pro-1', 30_000);
  }
  return { taskIds, watches };
}

/** Until the master's replica has received everything the master wrote (writes paused meanwhile by the caller). */
async function replicaCaughtUp(master: Redis): Promise<void> {
  for (;;) {
    const info = await master.info('replication');
    const offset = Number(/^master_repl_offset:(\d+)/m.exec(info)?.[1]);
    const replica = /^slave0:.*offset=(\d+)/m.exec(info);
    if (replica && Number(replica[1]) === offset) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Every task's final log, read over HTTP once the cluster has healed. */
interface LoggedEvent {
  seq: number;
  event_type: string;
  worker_id: string | null;
  timestamp: string;
}

async function finalLogs(taskIds: string[]): Promise<Map<string, LoggedEvent[]>> {
  const logs = new Map<string, LoggedEvent[]>();
  for (const id of taskIds) logs.set(id, (await pollUntilTerminal(stack!.url, id, 90_000)).map((e) => ({ seq: e.seq, event_type: e.event_type, worker_id: e.worker_id, timestamp: e.timestamp })));
  return logs;
}

describe('Redis Cluster failover', () => {
  it('a master killed mid-task (its replica in sync): every task ends, no event lost or duplicated for any watcher', async () => {
    const cluster = await startTestCluster();
    const { taskIds, watches } = await startTasks(cluster);
    const keys = new KeyBuilder(stack!.prefix);
    const victim = await cluster.masterOf(keys.task(taskIds[0]!).meta);
    const admin = new Redis(victim.url, { maxRetriesPerRequest: 1 });
    // Writes wait (they are not refused) while the replica catches up; then the master dies with them unexecuted.
    await admin.call('CLIENT', 'PAUSE', '10000', 'WRITE');
    await replicaCaughtUp(admin);
    admin.disconnect();
    const killedAt = Date.now();
    killNode(victim);
    await cluster.waitHealthy();
    const healedAt = Date.now();

    const logs = await finalLogs(taskIds);
    const watched = await Promise.all(watches);
    for (const [i, id] of taskIds.entries()) {
      const log = logs.get(id)!;
      assertContiguous(log.map((e) => e.seq));
      expect(log.at(-1)!.event_type, `task ${i}: ${log.map((e) => e.event_type).join(',')}`).toMatch(/^task_(completed|failed)$/);
      expect(log.filter((e) => e.event_type.startsWith('task_') && e.event_type !== 'task_queued')).toHaveLength(1);
      // The watcher, across its resumes, saw exactly the log: each seq once, the same event at each seq.
      expect(watched[i]!.events.map((e) => [e.seq, e.eventType])).toEqual(log.map((e) => [e.seq, e.event_type]));
    }
    // Every task completed, the one on the dead master's slot too, with events written after the kill: the failover
    // was survived mid-task, not avoided.
    expect(taskIds.filter((id) => logs.get(id)!.at(-1)!.event_type === 'task_completed').length).toBe(TASKS);
    expect(logs.get(taskIds[0]!)!.filter((e) => Date.parse(e.timestamp) >= killedAt).length).toBeGreaterThan(0);
    process.stderr.write(`failover: replica took over in ${healedAt - killedAt} ms; watcher resumes ${watched.map((w) => w.resumes).join(',')}\n`);
  }, 180_000);
});

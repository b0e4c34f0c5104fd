// What a failover's lost BullMQ writes leave (a task's jobs gone, its record kept), made by deleting keys, and what a
// user must then see of the task (tests/task-reconcile.int.test.ts, tests/task-read-repair.int.test.ts); a session turn's
// job lost the same way (tests/session-read-repair.int.test.ts).
import type { Queue } from 'bullmq';
import { expect } from 'vitest';
import type { TeamEvent } from '@cadre/protocol';
import { agentJobId } from '@cadre/store';
import { assertContiguous, httpClient, pollUntilTerminal, type TestRedisClient } from '@cadre/testing';

/**
 * Deletes a job as a failover that lost its writes leaves it: its hash and its own keys, its id in every list and
 * set of the queue, and its entry in its parent's dependencies.
 */
export async function loseJob(redis: TestRedisClient, queue: Queue, taskId: string, workerId: string): Promise<void> {
  await loseJobById(redis, queue, agentJobId(taskId, workerId));
}

/** loseJob for any job of the queue, by its id (a session turn's: turnJobId). */
export async function loseJobById(redis: TestRedisClient, queue: Queue, jobId: string): Promise<void> {
  const jobKey = queue.toKey(jobId);
  const parentKey = await redis.hget(jobKey, 'parentKey');
  const k = queue.keys;
  const tx = redis.multi()
    .del(jobKey, `${jobKey}:lock`, `${jobKey}:logs`, `${jobKey}:dependencies`, `${jobKey}:processed`, `${jobKey}:failed`, `${jobKey}:unsuccessful`)
    .lrem(k.wait!, 0, jobId).lrem(k.active!, 0, jobId).lrem(k.paused!, 0, jobId)
    .zrem(k['waiting-children']!, jobId).zrem(k.delayed!, jobId).zrem(k.prioritized!, jobId).zrem(k.completed!, jobId).zrem(k.failed!, jobId);
  if (parentKey) tx.srem(`${parentKey}:dependencies`, jobKey);
  await tx.exec();
  expect(await queue.getJob(jobId)).toBeUndefined();
}

/** What a user sees of a task brought to its end: completed once, log contiguous, each agent started once and completed. */
export async function expectCompletedOnce(url: string, taskId: string, agents: string[]): Promise<TeamEvent[]> {
  const events = await pollUntilTerminal(url, taskId, 30_000);
  assertContiguous(events.map((e) => e.seq));
  expect(events.filter((e) => e.event_type.startsWith('task_') && e.event_type !== 'task_queued').map((e) => e.event_type)).toEqual(['task_completed']);
  expect(events.at(-1)!.event_type).toBe('task_completed');
  const started = (id: string): number => events.filter((e) => e.event_type === 'worker_started' && e.worker_id === id).length;
  expect(Object.fromEntries(agents.map((id) => [id, started(id)]))).toEqual(Object.fromEntries(agents.map((id) => [id, 1])));
  const task = await httpClient(url).get<{ task: { status: string; workers: { worker_id: string; status: string }[] } }>(`/api/tasks/${taskId}`);
  expect(task.body.task.status).toBe('completed');
  expect(task.body.task.workers.map((w) => `${w.worker_id}:${w.status}`)).toEqual(agents.map((id) => `${id}:completed`));
  return events;
}

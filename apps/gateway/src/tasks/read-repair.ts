import { TERMINAL_TASK_STATUSES, type TaskStatus } from '@cadre/protocol';
import { scrubError, type Logger } from '@cadre/observability';
import { ThrottledChecks, type TaskStore } from '@cadre/store';
import type { TaskReconciler } from './task-reconciler.ts';

/** Tasks whose last check a gateway remembers (the least recently checked are forgotten first). */
const TRACKED = 10_000;

export interface ReadRepairDeps {
  store: TaskStore;
  reconciler: TaskReconciler;
  /** A task whose updated_at is older than this has stopped moving: worth a look (CADRE_ENQUEUE_GRACE_MS). */
  graceMs: number;
  logger: Logger;
  tracked?: number;
}

/**
 * Read repair: a failover can lose a task's jobs and also its listing (the workspace's unfinished set, the enqueue
 * mark: other slots than its record), and then the task reconciler's walk never finds it. A client that reads or
 * watches such a task still finds it: when the record read for the client says the task is unfinished and has not
 * changed (no event, no status) for longer than `graceMs`, the task is reconciled as a pass would (TaskReconciler.
 * reconcileTask) and listed again in its workspace, so the walks find it from then on. Off the request's path (the
 * answer never waits for it, its errors are logged), at most once per task per `graceMs` on this gateway. A task that
 * is moving, or has ended, costs nothing but the comparison.
 */
export class ReadRepair {
  private readonly deps: ReadRepairDeps;
  private readonly checks: ThrottledChecks;

  constructor(deps: ReadRepairDeps) {
    this.deps = deps;
    this.checks = new ThrottledChecks({
      periodMs: deps.graceMs, limit: deps.tracked ?? TRACKED, check: (taskId) => this.repair(taskId),
      onError: (taskId, err) => deps.logger.warn({ taskId, err: scrubError(err) }, 'could not repair a stuck task on read; a later read tries again'),
    });
  }

  /** A client read the task (its status and updated_at as just read); repairs it in the background if it is stuck. */
  seen(taskId: string, status: TaskStatus, updatedMs: number): void {
    const now = Date.now();
    if (!TERMINAL_TASK_STATUSES.includes(status) && now - updatedMs >= this.deps.graceMs) this.checks.run(taskId, now);
  }

  /** No repair starts from now on (the gateway drains; one already started ends by itself). */
  stop(): void {
    this.checks.stop();
  }

  private async repair(taskId: string): Promise<void> {
    const { store, reconciler } = this.deps;
    const [task, enqueueing] = await Promise.all([store.getTask(taskId), store.beingEnqueued([taskId])]);
    // Still marked: the enqueue sweeper's (it enqueues and lists the task), as the reconciler's pass leaves it.
    if (!task || enqueueing.has(taskId)) return;
    const [reason] = await Promise.all([reconciler.reconcileTask(task, 'read'), store.relist(task)]);
    if (reason) this.deps.logger.warn({ taskId, reason }, 'reconciled a stuck task a client read: its BullMQ jobs were lost');
  }
}

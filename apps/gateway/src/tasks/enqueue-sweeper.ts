import type { Logger } from '@cadre/observability';
import type { SessionEngine } from '@cadre/session';
import type { TaskStore, TeamQueue } from '@cadre/store';
import { scrubError } from '@cadre/observability';
import { repeatPass, type RepeatedPass } from '@cadre/lifecycle';

/**
 * Finishes the creations a gateway died in the middle of. A task is written (one script) before its jobs are added
 * to BullMQ (another slot, so another step); the store marks it first, and the creating gateway clears the mark
 * once the jobs are in. A mark older than `graceMs` means that gateway died: the sweeper enqueues the task if it is
 * still queued (job ids derive from the task, so a job that is already there is not added twice) and clears the
 * mark. Sessions the same way: a change that woke a turn (a message, a tool result, a turn's end in a worker) whose
 * process died before the turn's job was added (SessionEngine.enqueueStranded). Every gateway runs one (repeatPass);
 * replicas only repeat each other's no-ops.
 */
export class EnqueueSweeper {
  private repeat: RepeatedPass | undefined;
  private readonly opts: { store: TaskStore; queue: TeamQueue; sessions: SessionEngine; graceMs: number; logger: Logger };

  constructor(opts: { store: TaskStore; queue: TeamQueue; sessions: SessionEngine; graceMs: number; logger: Logger }) {
    this.opts = opts;
  }

  start(): void {
    this.repeat = repeatPass(() => this.pass(), { intervalMs: Math.max(50, Math.floor(this.opts.graceMs / 4)) });
  }

  stop(): void {
    void this.repeat?.stop();
  }

  /** One pass; returns how many stranded tasks and session turns it enqueued. */
  async sweep(): Promise<number> {
    const { store, queue, sessions, graceMs } = this.opts;
    let enqueued = 0;
    for (const taskId of await store.enqueueBacklog(Date.now() - graceMs, 100)) {
      const task = await store.getTask(taskId);
      // No task: the gateway died before its script ran. Not queued: it was enqueued (and ran, or was cancelled).
      if (task?.status === 'queued') {
        await queue.enqueueTask(task);
        enqueued++;
      }
      // A gateway lists a task beside enqueueing it, so one whose listing failed may be running already. A finished
      // one stays out (the unfinished set must not take it back).
      if (task) await store.relist(task);
      await store.enqueued(taskId);
    }
    return enqueued + (await sessions.enqueueStranded(Date.now() - graceMs));
  }

  private async pass(): Promise<void> {
    try {
      const enqueued = await this.sweep();
      if (enqueued > 0) this.opts.logger.warn({ enqueued }, 'enqueued tasks or session turns a process had left unenqueued');
    } catch (err) {
      this.opts.logger.error({ err: scrubError(err) }, 'enqueue sweep failed');
    }
  }
}

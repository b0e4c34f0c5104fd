import { randomUUID } from 'node:crypto';
import { TERMINAL_TASK_STATUSES, type TokenUsage } from '@cadre/protocol';
import { repeatPass, type RepeatedPass } from '@cadre/lifecycle';
import { scrubError, type Logger } from '@cadre/observability';
import { LEAD_WORKER_ID, StoreError, unfinishedWorkerIds, type TaskRecord, type TaskStore, type TeamQueue } from '@cadre/store';

/**
 * What a pass did to a task, and why: re-drove it (its lead's job was gone, or the job of a worker its lead waits
 * for, or its lead waited for workers that had all ended for good), or ended it (its lead's job had ended, the
 * task's end never recorded: failed, or completed with the result the lead's job returned).
 */
export type ReconcileReason = 'lead_job_lost' | 'worker_job_lost' | 'dependency_ended' | 'lead_job_ended' | 'lead_job_completed';
export const RECONCILE_ACTIONS: Record<ReconcileReason, 'redriven' | 'failed' | 'completed'> = {
  lead_job_lost: 'redriven', worker_job_lost: 'redriven', dependency_ended: 'redriven', lead_job_ended: 'failed', lead_job_completed: 'completed',
};
/** What found the task: a pass's walk of the unfinished sets, or a client reading it (ReadRepair). */
export type ReconcileTrigger = 'pass' | 'read';

/** Tasks read per page of a workspace's unfinished set, and at most per pass. */
const PAGE = 100;
const MAX_PER_PASS = 1_000;

export interface TaskReconcilerDeps {
  store: TaskStore;
  queue: TeamQueue;
  /** A task younger than this may still be having its jobs added (the enqueue sweeper's window): not looked at. */
  graceMs: number;
  intervalMs: number;
  logger: Logger;
  /** Hears of each task a pass (or a read) re-drove or failed. */
  onReconciled?: (reason: ReconcileReason, trigger: ReconcileTrigger) => void;
  /** Tasks per read (100) and at most per pass (1,000). */
  pageSize?: number;
  maxPerPass?: number;
}

/**
 * Where the next pass goes on: a workspace, its SSCAN cursor (null: its walk has ended) and the tasks of the last page
 * read that the pass's bound left over. '' sorts before every workspace: the start.
 */
interface Place {
  workspaceId: string;
  cursor: string | null;
  leftover: string[];
}
const START: Place = { workspaceId: '', cursor: '0', leftover: [] };

/**
 * What a pass did: how many tasks it read, the ids of those it re-drove or failed by reason, and of those it could not
 * reconcile; the workspaces whose unfinished set it could not read (left for the next walk), if any.
 */
export interface ReconcilePass {
  checked: number;
  reconciled: Partial<Record<ReconcileReason, string[]>>;
  errors: string[];
  failedWorkspaces?: string[];
}

/**
 * Re-adds the BullMQ jobs an unfinished team task needs when they are gone (or fails the task when it cannot). A task's record and log live in its
 * slot, its jobs in BullMQ's: Redis replicates asynchronously, so a failover can lose a job's add (or a flow's) that
 * the dying master acknowledged, and nothing would ever run the task again. Every `intervalMs` one gateway of the
 * cluster (the one that takes the turn) goes through the unfinished tasks (the workspaces' sets stop-all uses), a
 * bounded number per pass, going on where the last pass stopped (a workspace that cannot be read is passed over, an
 * ended or vanished task taken out of its set); for each task older than `graceMs` and not being enqueued still (the enqueue sweeper's), it
 * reads the roster, then the jobs of the lead and of every worker that has not finished:
 *
 * - the lead's job is missing: it is added again (TeamQueue.enqueueTask) — a planned team's plan step, whose next
 *   attempt keeps a team already planned and waits for its unfinished workers again; a named team's flow, with the
 *   unfinished workers whose jobs have not ended as the children (a job still there is linked to the lead again);
 * - the lead's job waits for its children and an unfinished worker's job is missing: that job is added again as
 *   the lead's child, so the lead still waits for it and synthesizes once;
 * - the lead's job has waited (longer than `graceMs`) only for workers that have ended, each job failed or gone: it
 *   is let go without them (`dependency_ended`), so it synthesizes once;
 * - the lead's job has ended (longer than `graceMs` ago) while the task has not: the end the lead's process wrote was
 *   lost, and the job cannot run again under its id, so the task completes with the result the job returned
 *   (`lead_job_completed`) or fails (`lead_job_ended`).
 *
 * A worker whose roster entry has ended is never given a job again (and its claim would refuse it: worker_finished).
 * Job ids derive from task and worker, so passes in several gateways at once add each job once. A healthy task is
 * only read. The roster is read before the jobs: a worker's job is added before the roster says its lead waits.
 */
export class TaskReconciler {
  private readonly deps: TaskReconcilerDeps;
  private readonly pageSize: number;
  private readonly maxPerPass: number;
  private repeat: RepeatedPass | undefined;
  private place: Place = START;
  /** Who holds the turn, in the turn's key. */
  private readonly holder = randomUUID();

  constructor(deps: TaskReconcilerDeps) {
    this.deps = deps;
    this.pageSize = deps.pageSize ?? PAGE;
    this.maxPerPass = deps.maxPerPass ?? MAX_PER_PASS;
  }

  start(): void {
    this.repeat = repeatPass(() => this.turn().catch((err: unknown) => {
      this.deps.logger.error({ err: scrubError(err) }, 'task reconcile pass failed; the next pass tries again');
    }), { intervalMs: this.deps.intervalMs });
  }

  /** Resolves once a pass in progress has settled. */
  stop(): Promise<void> {
    return this.repeat?.stop() ?? Promise.resolve();
  }

  /**
   * One pass: up to maxPerPass tasks from where the last pass stopped (once the last workspace is done, the next
   * pass starts again at the first).
   */
  async reconcile(): Promise<ReconcilePass> {
    const { store } = this.deps;
    const result: ReconcilePass = { checked: 0, reconciled: {}, errors: [] };
    const workspaces = await store.workspaceIds();
    // The workspace the last pass stopped in, or (gone) the next one from its start.
    let i = workspaces.findIndex((ws) => ws >= this.place.workspaceId);
    let { cursor, leftover } = workspaces[i] === this.place.workspaceId ? this.place : START;
    this.place = START;
    for (; i >= 0 && i < workspaces.length; i++, cursor = '0', leftover = []) {
      const workspaceId = workspaces[i]!;
      try {
        while (leftover.length > 0 || cursor !== null) {
          if (leftover.length === 0) {
            const page = await store.activeTaskPage(workspaceId, cursor!, this.pageSize);
            leftover = page.taskIds;
            cursor = page.next === '0' ? null : page.next;
          }
          const taskIds = leftover.slice(0, this.maxPerPass - result.checked);
          leftover = leftover.slice(taskIds.length);
          const enqueueing = await store.beingEnqueued(taskIds);
          for (const taskId of taskIds) {
            if (enqueueing.has(taskId)) continue;
            // One task that cannot be re-driven (its job refused) does not hold up the others; the next walk retries it.
            const reason = await this.reconcileById(taskId, workspaceId).catch((err: unknown) => {
              result.errors.push(taskId);
              if (result.errors.length === 1) this.deps.logger.warn({ taskId, err: scrubError(err) }, 'could not reconcile a task');
              return null;
            });
            if (reason) (result.reconciled[reason] ??= []).push(taskId);
          }
          result.checked += taskIds.length;
          if (result.checked >= this.maxPerPass) {
            this.place = { workspaceId, cursor, leftover };
            return result;
          }
        }
      } catch (err) {
        // A workspace whose slot does not answer (its set, the enqueue marks) does not hold up the ones after it: the
        // pass goes on with the next, and the next walk reads this one again.
        (result.failedWorkspaces ??= []).push(workspaceId);
        if (result.failedWorkspaces.length === 1) this.deps.logger.warn({ workspaceId, err: scrubError(err) }, 'could not read a workspace\'s unfinished tasks');
      }
    }
    return result;
  }

  private async reconcileById(taskId: string, workspaceId: string): Promise<ReconcileReason | null> {
    const task = await this.deps.store.getTask(taskId);
    if (!task || TERMINAL_TASK_STATUSES.includes(task.status)) {
      // Ended, its set's SREM lost (it is a separate write), or its record gone: not to be read again every pass.
      await this.deps.store.unlistUnfinished(workspaceId, taskId);
      return null;
    }
    return this.reconcileTask(task, 'pass');
  }

  /**
   * Re-adds what the task's jobs lack, or fails the task; the reason, or null when it lacked nothing (or is not for
   * this pass). A pass's decision, also made for a task a client reads (ReadRepair), with the task it read.
   */
  async reconcileTask(task: TaskRecord, trigger: ReconcileTrigger): Promise<ReconcileReason | null> {
    const { queue, graceMs } = this.deps;
    const taskId = task.task_id;
    if (TERMINAL_TASK_STATUSES.includes(task.status) || Date.now() - Date.parse(task.created_at) < graceMs) return null;
    const unfinished = unfinishedWorkerIds(task.workers);
    const jobs = await queue.jobStates(taskId, [LEAD_WORKER_ID, ...unfinished]);
    const leadJob = jobs.get(LEAD_WORKER_ID)!;
    let reason: ReconcileReason | null = null;
    if (leadJob.state === 'missing') {
      // A child whose job has ended is not waited for again (it would never end again); the lead's synthesize step
      // reads the workers' ends from the roster.
      await queue.enqueueTask(task, unfinished.filter((id) => jobs.get(id)!.state !== 'finished'));
      reason = 'lead_job_lost';
    } else if (leadJob.state === 'waiting-children') {
      const missing = unfinished.filter((id) => jobs.get(id)!.state === 'missing');
      if (missing.length > 0) {
        await queue.addWorkerJobs(taskId, missing);
        reason = 'worker_job_lost';
      } else if (Date.now() - leadJob.since >= graceMs && (await this.releaseEndedChildren(task))) {
        reason = 'dependency_ended';
      }
    } else if (leadJob.state === 'finished' && Date.now() - leadJob.finishedAt >= graceMs) {
      // The lead's job ended, and longer ago than its process takes to write the end (a lead writes the task's end
      // before its job ends; the worker that sees a job fail for good, after): that write was lost. The job cannot
      // run again under its id, and running the lead again could redo a finished synthesis: the task ends with what
      // the job left, a result it returned or a failure saying so. A task that ended meanwhile is refused: nothing to do.
      reason = await this.recordLeadEnd(task, leadJob.how).catch((err: unknown) => {
        if (err instanceof StoreError && (err.code === 'task_finished' || err.code === 'task_not_found')) return null;
        throw err;
      });
    }
    if (reason) this.deps.onReconciled?.(reason, trigger);
    return reason;
  }

  /**
   * A lead waiting (longer than the grace) only for workers that have all ended for good, each job failed or gone: a
   * failed child linked to it again by a stale read (BullMQ's duplicate rule SADDs a failed job into a new parent's
   * dependencies, and it never leaves them) would hold it for ever. Those dependencies are let go, so the lead
   * synthesizes once. False when the lead still waits for anything else.
   */
  private async releaseEndedChildren(task: TaskRecord): Promise<boolean> {
    const { queue } = this.deps;
    const ended = new Set(task.workers.filter((w) => w.status === 'completed' || w.status === 'failed').map((w) => w.worker_id));
    const deps = await queue.leadDependencies(task.task_id);
    if (deps.length === 0 || !deps.every((id) => id !== null && ended.has(id))) return false;
    const states = await queue.jobStates(task.task_id, deps as string[]);
    const failed = [...states].filter(([, s]) => s.state === 'finished' && s.how === 'failed').map(([id]) => id);
    const gone = [...states].filter(([, s]) => s.state === 'missing').map(([id]) => id);
    if (failed.length + gone.length < deps.length) return false;
    await queue.releaseEndedChildren(task.task_id, failed, gone);
    return true;
  }

  /**
   * Writes the end of a task whose lead's job ended without it: completed with the result the job returned when its
   * synthesis completed (the usage, the roster's), else failed, saying why.
   */
  private async recordLeadEnd(task: TaskRecord, how: 'completed' | 'failed'): Promise<ReconcileReason> {
    const { store, queue } = this.deps;
    const taskId = task.task_id;
    if (how === 'completed') {
      const returned = (await queue.returnValueOf(taskId, LEAD_WORKER_ID)) as { status?: unknown; result?: unknown } | null;
      if (returned?.status === 'completed' && typeof returned.result === 'string') {
        const usage = task.workers.reduce<TokenUsage>((sum, w) => ({
          prompt_tokens: sum.prompt_tokens + (w.usage?.prompt_tokens ?? 0),
          completion_tokens: sum.completion_tokens + (w.usage?.completion_tokens ?? 0),
          total_tokens: sum.total_tokens + (w.usage?.total_tokens ?? 0),
        }), { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });
        const lead = { outcome: 'completed', result: returned.result, usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } } as const;
        await store.finishWorker(taskId, LEAD_WORKER_ID, '', lead, { status: 'completed', result: returned.result, usage }, task.workspace_id);
        return 'lead_job_completed';
      }
    }
    const why = how === 'failed' ? `failed (${(await queue.failedReasonOf(taskId, LEAD_WORKER_ID)) ?? 'no reason kept'})` : 'completed';
    const message = `the lead's job ${why} but the task's end was never recorded (lost with a failover?)`;
    await store.finishWorker(taskId, LEAD_WORKER_ID, '', { outcome: 'failed', reason: 'lead_job_ended', message }, { status: 'failed', reason: `lead_job_ended: ${message}` }, task.workspace_id);
    return 'lead_job_ended';
  }

  /**
   * A pass, if this process takes the cluster's turn: one pass per cluster per interval (the turn is a `SET NX PX
   * intervalMs` key, and each process tries again an interval after its last pass ended, as BullMQ's stalled-check
   * lock goes), going on where the last pass of any process stopped. Null when another process has the turn.
   */
  async turn(): Promise<ReconcilePass | null> {
    const { store, intervalMs, logger } = this.deps;
    if (!(await store.takeReconcileTurn(this.holder, intervalMs))) return null;
    const kept = await store.reconcilePlace();
    if (kept) this.place = JSON.parse(kept) as Place;
    const pass = await this.reconcile();
    await store.setReconcilePlace(JSON.stringify(this.place));
    const { checked, reconciled, errors, failedWorkspaces } = pass;
    if (Object.keys(reconciled).length > 0 || errors.length > 0 || failedWorkspaces) logger.warn({ checked, reconciled, errors, failedWorkspaces }, 'reconciled unfinished tasks whose BullMQ jobs were lost');
    return pass;
  }
}

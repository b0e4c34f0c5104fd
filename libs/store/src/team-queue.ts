import { FlowProducer, Job, Queue, type ConnectionOptions, type Telemetry } from 'bullmq';
import type { RedisClient } from './connect.ts';
import type { KeyBuilder } from './keys.ts';
import { LEAD_WORKER_ID, type TaskRecord, type WorkerView } from './task-types.ts';

/** The queue every agent job (lead or worker) goes through. */
export const AGENT_QUEUE = 'agents';

/** `plan`: the lead spawns workers; `synthesize`: the lead turns its workers' results into the task result. */
export type LeadStep = 'plan' | 'synthesize';

export interface AgentJobData {
  taskId: string;
  workerId: string;
  step?: LeadStep;
  /** How many attempts handed this job back because Redis could not take their writes (bounded by the attempts). */
  outages?: number;
}

/** Job ids derive from task and worker, so enqueueing twice adds nothing (BullMQ ignores a known job id). */
export function agentJobId(taskId: string, workerId: string): string {
  return `${taskId}_${workerId}`;
}

/** Options every agent job gets: a failed worker must not hold its lead back (the lead sees it in the roster). */
export const AGENT_JOB_OPTIONS = {
  attempts: 1,
  removeOnComplete: { age: 3600, count: 10_000 },
  removeOnFail: { age: 24 * 3600 },
} as const;

/**
 * Where an agent job stands, as a re-drive needs to know it: `missing` (no job hash: never added, or its add lost),
 * `waiting-children` (a lead waiting for its workers, `since` in ms), `finished` (`how`, and `finishedAt` in ms) or
 * `live` (waiting, delayed or running: it will run or is running).
 */
export type AgentJobState =
  | { state: 'missing' | 'live' }
  | { state: 'waiting-children'; since: number }
  | { state: 'finished'; how: 'completed' | 'failed'; finishedAt: number };

/** The team's workers (not the lead) whose roster entry has not ended: those a lead still waits for. */
export function unfinishedWorkerIds(workers: readonly Pick<WorkerView, 'worker_id' | 'status'>[]): string[] {
  return workers.filter((w) => w.worker_id !== LEAD_WORKER_ID && w.status !== 'completed' && w.status !== 'failed').map((w) => w.worker_id);
}

export class TeamQueue {
  private readonly queue: Queue<AgentJobData>;
  private readonly flow: FlowProducer;
  /** The queue's own connection: job states are read with it (all of BullMQ's keys share one slot). */
  private readonly redis: RedisClient;
  private readonly keys: KeyBuilder;

  /**
   * `telemetry`: BullMQ's tracing hook; each job then carries its enqueuer's trace context in its options.
   * `onError` hears the queue's and flow producer's connection errors; without a listener BullMQ prints them to
   * the console, arguments (an AUTH password among them) included.
   */
  constructor(opts: { connection: RedisClient; keys: KeyBuilder; telemetry?: Telemetry | undefined; onError: (err: Error) => void }) {
    const connection = opts.connection as unknown as ConnectionOptions;
    const telemetry = opts.telemetry ? { telemetry: opts.telemetry } : {};
    this.queue = new Queue<AgentJobData>(AGENT_QUEUE, { connection, prefix: opts.keys.bullPrefix(), ...telemetry });
    this.flow = new FlowProducer({ connection, prefix: opts.keys.bullPrefix(), ...telemetry });
    this.queue.on('error', opts.onError);
    this.flow.on('error', opts.onError);
    this.redis = opts.connection;
    this.keys = opts.keys;
  }

  /**
   * A named team is one BullMQ flow: the lead is the parent and runs (to synthesize) once every worker child has
   * finished. A planned team starts with the lead alone; it adds its workers as children when it has planned.
   * `workerIds`: a named team's children, by default its workers that have not finished (all of a new task's); a
   * child whose job is already there is linked to the lead again (BullMQ's duplicate rule), not added twice.
   */
  async enqueueTask(task: TaskRecord, workerIds: readonly string[] = unfinishedWorkerIds(task.workers)): Promise<void> {
    const taskId = task.task_id;
    if (task.mode === 'planned') {
      await this.queue.add(LEAD_WORKER_ID, { taskId, workerId: LEAD_WORKER_ID, step: 'plan' }, { ...AGENT_JOB_OPTIONS, jobId: agentJobId(taskId, LEAD_WORKER_ID) });
      return;
    }
    await this.flow.add({
      name: LEAD_WORKER_ID,
      queueName: AGENT_QUEUE,
      data: { taskId, workerId: LEAD_WORKER_ID, step: 'synthesize' },
      opts: { ...AGENT_JOB_OPTIONS, jobId: agentJobId(taskId, LEAD_WORKER_ID) },
      children: workerIds.map((workerId) => ({
        name: 'worker',
        queueName: AGENT_QUEUE,
        data: { taskId, workerId },
        opts: { ...AGENT_JOB_OPTIONS, jobId: agentJobId(taskId, workerId), ignoreDependencyOnFailure: true },
      })),
    });
  }

  /**
   * Adds workers' jobs as children of the lead's job (which must exist), so the lead's synthesize step runs once
   * they have all finished: a planned team's when its lead has planned, or a job that was lost. A job already there
   * is linked to the lead again if it has not finished (BullMQ's duplicate rule), not added twice.
   */
  async addWorkerJobs(taskId: string, workerIds: readonly string[]): Promise<void> {
    if (workerIds.length === 0) return;
    const lead = { id: agentJobId(taskId, LEAD_WORKER_ID), queue: this.queue.qualifiedName };
    await this.queue.addBulk(
      workerIds.map((workerId) => ({
        name: 'worker',
        data: { taskId, workerId },
        opts: { ...AGENT_JOB_OPTIONS, jobId: agentJobId(taskId, workerId), parent: lead, ignoreDependencyOnFailure: true },
      })),
    );
  }

  /**
   * The state of each agent's job of a task (`workerIds`, the lead among them if wanted), read in one transaction so
   * the states are of one moment.
   */
  async jobStates(taskId: string, workerIds: readonly string[]): Promise<Map<string, AgentJobState>> {
    const { 'waiting-children': waitingChildren, completed, failed } = this.queue.keys;
    const tx = this.redis.multi();
    for (const workerId of workerIds) {
      const jobId = agentJobId(taskId, workerId);
      tx.exists(this.keys.bullJob(AGENT_QUEUE, jobId)).zscore(waitingChildren!, jobId).zscore(completed!, jobId).zscore(failed!, jobId);
    }
    const replies = await tx.exec();
    if (!replies) throw new Error(`reading the jobs of task ${taskId}: the transaction was discarded`);
    const values = replies.map(([err, value]) => {
      if (err) throw err;
      return value;
    });
    return new Map(workerIds.map((workerId, i) => {
      const [exists, waitingSince, completedAt, failedAt] = values.slice(i * 4, i * 4 + 4) as [number, string | null, string | null, string | null];
      const state: AgentJobState = exists === 0 ? { state: 'missing' }
        : completedAt !== null ? { state: 'finished', how: 'completed', finishedAt: Number(completedAt) }
          : failedAt !== null ? { state: 'finished', how: 'failed', finishedAt: Number(failedAt) }
            : waitingSince !== null ? { state: 'waiting-children', since: Number(waitingSince) } : { state: 'live' };
      return [workerId, state];
    }));
  }

  /** Why BullMQ failed an agent's job (what it threw, or its stall check's message); null when it has not failed. */
  async failedReasonOf(taskId: string, workerId: string): Promise<string | null> {
    const job = await Job.fromId(this.queue, agentJobId(taskId, workerId));
    return job?.failedReason ?? null;
  }

  /** What an agent's completed job returned (the processor's AgentJobResult); null when it has none. */
  async returnValueOf(taskId: string, workerId: string): Promise<unknown> {
    const job = await Job.fromId(this.queue, agentJobId(taskId, workerId));
    return job?.returnvalue ?? null;
  }

  /**
   * The workers whose jobs the lead's job still waits for (its BullMQ `:dependencies`); a member that is not an
   * agent job of this task is given as null.
   */
  async leadDependencies(taskId: string): Promise<(string | null)[]> {
    const members = await this.redis.smembers(`${this.queue.toKey(agentJobId(taskId, LEAD_WORKER_ID))}:dependencies`);
    const own = this.queue.toKey(agentJobId(taskId, ''));
    return members.map((key) => (key.startsWith(own) && key.length > own.length ? key.slice(own.length) : null));
  }

  /**
   * Lets the lead's job go on without the given workers, each of which has ended for good: a failed job is taken out
   * of the lead's dependencies (BullMQ's removeChildDependency, which moves the lead on once none is left); a job
   * that is gone is added again, so it runs, is refused its claim (worker_finished), completes and, like any child
   * that completes, leaves the lead's dependencies.
   */
  async releaseEndedChildren(taskId: string, failed: readonly string[], gone: readonly string[]): Promise<void> {
    const leadKey = this.queue.toKey(agentJobId(taskId, LEAD_WORKER_ID));
    for (const workerId of failed) {
      const job = await Job.fromId(this.queue, agentJobId(taskId, workerId));
      if (job?.parentKey === leadKey) await job.removeChildDependency();
    }
    await this.addWorkerJobs(taskId, gone);
  }

  /**
   * Runs a worker's delayed job now (a worker parked on approvals sleeps as a delayed job). A job that is not
   * delayed (yet) is left alone: the worker re-reads its approvals after parking and promotes itself.
   */
  async wakeWorker(taskId: string, workerId: string): Promise<void> {
    const job = await Job.fromId(this.queue, agentJobId(taskId, workerId));
    await job?.promote().catch(() => undefined);
  }

  /** The BullMQ queues behind this team queue, for an admin UI (bull-board) to inspect. */
  adminQueues(): Queue[] {
    return [this.queue];
  }

  async depth(): Promise<Record<string, number>> {
    return this.queue.getJobCounts('waiting', 'active', 'delayed', 'waiting-children', 'prioritized');
  }

  async close(): Promise<void> {
    await Promise.all([this.queue.close(), this.flow.close()]);
  }
}

import { FlowProducer, Job, Queue, type ConnectionOptions, type Telemetry } from 'bullmq';
import type { RedisClient } from './connect.ts';
import type { KeyBuilder } from './keys.ts';
import { LEAD_WORKER_ID, type TaskRecord } from './task-types.ts';

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

export class TeamQueue {
  private readonly queue: Queue<AgentJobData>;
  private readonly flow: FlowProducer;

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
  }

  /**
   * A named team is one BullMQ flow: the lead is the parent and runs (to synthesize) once every worker child has
   * finished. A planned team starts with the lead alone; it adds its workers as children when it has planned.
   */
  async enqueueTask(task: TaskRecord): Promise<void> {
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
      children: task.workers
        .filter((w) => w.worker_id !== LEAD_WORKER_ID)
        .map((w) => ({
          name: 'worker',
          queueName: AGENT_QUEUE,
          data: { taskId, workerId: w.worker_id },
          opts: { ...AGENT_JOB_OPTIONS, jobId: agentJobId(taskId, w.worker_id), ignoreDependencyOnFailure: true },
        })),
    });
  }

  /**
   * Adds a planned team's workers as children of its lead's job (`lead`: the lead's job id and queue-qualified name),
   * so the lead's synthesize step runs once they have all finished.
   */
  async addWorkerJobs(taskId: string, workerIds: readonly string[], lead: { id: string; queue: string }): Promise<void> {
    await this.queue.addBulk(
      workerIds.map((workerId) => ({
        name: 'worker',
        data: { taskId, workerId },
        opts: { ...AGENT_JOB_OPTIONS, jobId: agentJobId(taskId, workerId), parent: lead, ignoreDependencyOnFailure: true },
      })),
    );
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

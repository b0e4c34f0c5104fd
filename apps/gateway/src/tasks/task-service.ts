import { annotateSpan, scrubError, type Logger } from '@cadre/observability';
import { resolveTools, UnknownToolError } from '@cadre/agent';
import { TERMINAL_TASK_STATUSES, canonicalUuid, type TaskStatus, type TeamEvent } from '@cadre/protocol';
import { StoreError, decodeTaskCursor, policyProblem, type ApprovalPolicy, type ApprovalStore, type EventFanout, type TaskListPage, type LogWatcher, type TaskRecord, type TaskStore, type TeamSpec, type TeamQueue } from '@cadre/store';
import { canAccess, type Principal } from '../auth.ts';
import { ApiError } from '../errors.ts';
import type { ReadRepair } from './read-repair.ts';

/** A lead that plans its own team: it has the spawn_worker tool. */
export const DEFAULT_LEAD_INSTRUCTIONS =
  'You lead a team of agents. Plan the work, spawn workers for its parts with spawn_worker, then combine their results into one answer.';
/** A lead whose workers the request named: it has no spawn_worker, only their results to combine. */
export const DEFAULT_NAMED_LEAD_INSTRUCTIONS =
  'You lead a team of agents whose workers were chosen for you and work on the goal in parallel. When they finish, combine their results into one answer.';
export const DEFAULT_WORKER_INSTRUCTIONS = 'Do your part of the team goal and answer with your findings.';

/** A team task as a client asks for it (each edge validates its own wire form first). */
export interface CreateTaskRequest {
  workspace_id: string;
  goal: string;
  team?: {
    lead?: { instructions?: string; model?: string };
    workers?: { role: string; instructions?: string; model?: string; tools?: string[]; approval_policy?: ApprovalPolicy }[];
    max_workers?: number;
    approval_policy?: ApprovalPolicy;
  };
  metadata?: Record<string, unknown>;
}

export interface TaskServiceDeps {
  store: TaskStore;
  /** A cancel cancels the task's pending approvals; the workspace's approvals inbox is told here. */
  approvals: ApprovalStore;
  queue: TeamQueue;
  fanout: EventFanout;
  logger: Logger;
  defaultMaxWorkers: number;
  /** Told of each unfinished task a client reads or watches (get, events, watch): repairs a stuck one off the request's path. */
  readRepair?: ReadRepair;
}

/** The task operations behind both HTTP and gRPC, so the two edges cannot drift apart. */
export class TaskService {
  private readonly deps: TaskServiceDeps;

  constructor(deps: TaskServiceDeps) {
    this.deps = deps;
  }

  async create(principal: Principal, body: CreateTaskRequest, idempotencyKey?: string): Promise<{ task: TaskRecord; created: boolean }> {
    if (!canAccess(principal, body.workspace_id)) {
      throw new ApiError('permission_denied', `this key is not valid for workspace "${body.workspace_id}"`);
    }
    const team = normaliseTeam(body, this.deps.defaultMaxWorkers);
    const { task, created } = await this.deps.store.createTask(
      { workspace_id: body.workspace_id, goal: body.goal, team, metadata: body.metadata ?? {} },
      idempotencyKey,
    );
    annotateSpan({ task_id: task.task_id, workspace_id: task.workspace_id });
    // Enqueueing is idempotent (job ids derive from the task), so a retry after a crash between the two
    // steps finishes the first request's work instead of leaving the task queued forever; without a retry, the
    // enqueue sweeper does it (the store marked the task before writing it).
    // A retry cannot know whether the first request listed the task (it may have died between its script and the
    // listing) and clears the mark the sweeper would have listed it by: it lists an unfinished task again (the index
    // is a set; the new-task count is the first request's alone).
    const list = (): Promise<void> => (created ? this.deps.store.listNew(task) : this.deps.store.relist(task));
    if (task.status === 'queued') {
      // The listing and the jobs are in different slots and neither needs the other: sent together, one round trip.
      const [listed, enqueued] = await Promise.allSettled([list(), this.deps.queue.enqueueTask(task)]);
      if (enqueued.status === 'rejected') {
        // Nobody would ever run it: end it now rather than leave it queued for ever. (With an Idempotency-Key
        // the client's retry gets the cancelled task and can submit a new one.)
        await this.deps.store.cancelTask(task.task_id, 'could not be enqueued').catch(() => undefined);
        throw enqueued.reason;
      }
      // Not listed: the mark stays, and the sweeper lists it.
      if (listed.status === 'rejected') throw listed.reason;
    } else {
      await list();
    }
    // The jobs are in: the answer need not wait for the mark to go. If clearing it fails, the sweeper finds the
    // task enqueued and clears it then.
    this.deps.store.enqueued(task.task_id).catch((err: unknown) => this.deps.logger.warn({ taskId: task.task_id, err: scrubError(err) }, 'could not clear the enqueue mark; the sweeper will'));
    if (created) this.deps.logger.info({ taskId: task.task_id, workspaceId: task.workspace_id, mode: task.mode }, 'task created');
    return { task, created };
  }

  /**
   * Every workspace that has had tasks, runs or approvals, by name: what stop-all without a workspace reaches, for
   * an operator to see first (`cadre run stop-all --all-workspaces`). A workspace's key may not learn the others.
   */
  async workspaces(principal: Principal): Promise<string[]> {
    if (principal.workspaces !== 'all') throw new ApiError('permission_denied', 'listing workspaces needs a key valid for every workspace');
    return this.deps.store.workspaceIds();
  }

  /** A workspace's tasks, newest first, a page at a time (`cursor` is the previous page's next_cursor). */
  async list(principal: Principal, workspaceId: string, opts: { status?: TaskStatus; cursor?: string; limit: number }): Promise<TaskListPage> {
    if (!canAccess(principal, workspaceId)) throw new ApiError('permission_denied', `this key is not valid for workspace "${workspaceId}"`);
    const afterMember = opts.cursor === undefined ? undefined : decodeTaskCursor(opts.cursor);
    if (afterMember === null) throw new ApiError('invalid_argument', 'cursor is not one this API handed out (pass next_cursor from the previous page)');
    return this.deps.store.listTasks(workspaceId, { status: opts.status, afterMember, limit: opts.limit });
  }

  async get(principal: Principal, rawTaskId: string): Promise<TaskRecord> {
    const taskId = taskIdFrom(rawTaskId);
    const task = await this.deps.store.getTask(taskId);
    // Another workspace's task is indistinguishable from a missing one.
    if (!task || !canAccess(principal, task.workspace_id)) throw new ApiError('not_found', `task ${taskId} not found`);
    this.deps.readRepair?.seen(taskId, task.status, Date.parse(task.updated_at));
    return task;
  }

  async events(principal: Principal, rawTaskId: string, afterSeq: number, limit: number): Promise<{ events: TeamEvent[]; next_after_seq: number }> {
    const taskId = taskIdFrom(rawTaskId);
    const notFound = new ApiError('not_found', `task ${taskId} not found`);
    const page = await this.deps.store.readEvents(taskId, afterSeq, limit).catch(async (err: unknown) => {
      // Only the store's own refusals (a cursor error) say anything about the task; any other failure (Redis failing
      // over) says nothing, and goes out as it is (503), never as "not found".
      if (!(err instanceof StoreError)) throw err;
      // A cursor error must not tell another workspace's key that the task exists.
      const workspace = await this.deps.store.workspaceOf(taskId);
      throw workspace && canAccess(principal, workspace) ? err : notFound;
    });
    if (!page || !canAccess(principal, page.workspace_id)) throw notFound;
    this.deps.readRepair?.seen(taskId, page.status, page.updated_ms);
    return { events: page.events, next_after_seq: page.events.at(-1)?.seq ?? afterSeq };
  }

  async cancel(principal: Principal, rawTaskId: string, reason: string): Promise<TaskRecord> {
    const task = await this.get(principal, rawTaskId);
    const taskId = task.task_id;
    if (task.status === 'completed' || task.status === 'failed') {
      throw new ApiError('conflict', `task ${taskId} already ${task.status}; only a queued or running task can be cancelled`);
    }
    const outcome = await this.deps.store.cancelTask(taskId, reason);
    if (outcome === 'cancelled') {
      this.deps.logger.info({ taskId, reason }, 'task cancelled');
      await this.deps.approvals.announceCancelled(taskId);
    }
    return (await this.deps.store.getTask(taskId)) ?? task;
  }

  /** Unfinished tasks of a workspace (stop-all's scope). */
  activeTaskIds(workspaceId: string): Promise<string[]> {
    return this.deps.store.activeTaskIds(workspaceId);
  }

  /** Operator cancel (stop-all): the same path as POST cancel; false when the task had already ended. */
  async cancelForOperator(taskId: string, reason: string): Promise<boolean> {
    try {
      if ((await this.deps.store.cancelTask(taskId, reason)) !== 'cancelled') return false;
      await this.deps.approvals.announceCancelled(taskId);
      return true;
    } catch (err) {
      if (err instanceof StoreError) return false;
      throw err;
    }
  }

  /**
   * A live view of the task's events after `afterSeq`, ending after the terminal event; `null` when the reader
   * already has everything (a finished task read up to its last event).
   */
  async watch(principal: Principal, rawTaskId: string, afterSeq: number): Promise<LogWatcher<TeamEvent> | null> {
    const taskId = taskIdFrom(rawTaskId);
    const task = await this.deps.store.taskHead(taskId);
    if (!task || !canAccess(principal, task.workspace_id)) throw new ApiError('not_found', `task ${taskId} not found`);
    if (afterSeq > task.last_seq) {
      throw new ApiError('out_of_range', `after_seq ${afterSeq} is ahead of task ${taskId}'s log (last seq ${task.last_seq})`);
    }
    if (afterSeq === task.last_seq && TERMINAL_TASK_STATUSES.includes(task.status)) return null;
    this.deps.readRepair?.seen(taskId, task.status, task.updated_ms);
    return this.deps.fanout.watch(this.deps.store.taskLog(taskId), afterSeq);
  }

}

/**
 * A task id as the store keys it (lower-case, hyphenated) from any spelling roz accepts: upper case, no hyphens,
 * `{braces}`, `urn:uuid:`. Each edge reads ids through this, so every spelling names the same task.
 */
export function taskIdFrom(raw: string): string {
  if (raw === '') throw new ApiError('invalid_argument', 'task_id is required');
  const taskId = canonicalUuid(raw);
  if (taskId === null) throw new ApiError('invalid_argument', `task_id must be a UUID, got "${raw.slice(0, 64)}"`);
  return taskId;
}

function normaliseTeam(body: CreateTaskRequest, defaultMaxWorkers: number): TeamSpec {
  const workers = (body.team?.workers ?? []).map((w) => ({
    role: w.role,
    instructions: w.instructions ?? DEFAULT_WORKER_INSTRUCTIONS,
    model: w.model,
    tools: w.tools ?? [],
    ...(w.approval_policy && { approval_rules: JSON.stringify(w.approval_policy.rules) }),
  }));
  checkPolicy(body.team?.approval_policy, 'team.approval_policy');
  (body.team?.workers ?? []).forEach((w, i) => checkPolicy(w.approval_policy, `team.workers[${i}].approval_policy`));
  for (const w of workers) {
    try {
      resolveTools(w.tools);
    } catch (err) {
      if (err instanceof UnknownToolError) throw new ApiError('unprocessable', `team.workers[${w.role}]: ${err.message}`);
      throw err;
    }
  }
  const maxWorkers = body.team?.max_workers ?? defaultMaxWorkers;
  if (workers.length > maxWorkers) {
    throw new ApiError('unprocessable', `team.workers has ${workers.length} workers but max_workers is ${maxWorkers}`);
  }
  return {
    lead: {
      instructions: body.team?.lead?.instructions ?? (workers.length > 0 ? DEFAULT_NAMED_LEAD_INSTRUCTIONS : DEFAULT_LEAD_INSTRUCTIONS),
      model: body.team?.lead?.model,
    },
    workers,
    max_workers: maxWorkers,
    ...(body.team?.approval_policy && { approval_policy: body.team.approval_policy }),
  };
}

/** What the schema cannot check in a policy (a `when` regex that does not compile): 400 naming the rule. */
export function checkPolicy(policy: ApprovalPolicy | undefined, what: string): void {
  const problem = policy ? policyProblem(policy.rules, `${what}.rules`) : null;
  if (problem) throw new ApiError('invalid_argument', problem);
}

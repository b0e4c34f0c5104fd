import { createHash, randomUUID } from 'node:crypto';
import type { RedisClient } from './connect.ts';
import { TERMINAL_TASK_STATUSES, isTerminalTeamEvent, type TeamEvent, type TeamEventInput, type TaskStatus, type TokenUsage } from '@cadre/protocol';
import { readHeadAndPage, type WatchableLog } from './event-fanout.ts';
import { KeyBuilder, type TaskKeys } from './keys.ts';
import { checkCursor, scriptError } from './errors.ts';
import { scriptsOf, type StoreScripts } from './scripts.ts';
import type { ParkedState } from './approval-store.ts';
import { LEAD_WORKER_ID, type NewTask, type TaskContext, type TaskRecord, type WorkerRecord, type WorkerView } from './task-types.ts';
import { decodeEntry, fieldsOf, type StreamEntry } from './event-codec.ts';
import { listMember, listTasks, TASK_LIST_MAX_ENTRIES, type TaskListPage } from './task-list.ts';
import { DEFAULT_RETENTION_SEC } from '@cadre/config';

export interface TaskStoreOptions {
  redis: RedisClient;
  keys?: KeyBuilder;
  /** Seconds a finished task's keys (log included) are kept. */
  retentionSec?: number;
  /** Events kept per task log; older ones are trimmed and a cursor before them is an explicit error. */
  maxEventsPerTask?: number;
  /** Entries kept in each workspace's task listing (GET /api/tasks). */
  taskListMaxEntries?: number;
}

export interface ClaimResult {
  kind: 'started' | 'resumed' | 'held';
  attempt: number;
  worker: WorkerRecord;
  task: TaskContext;
  /** The lead's claim only: the roster as it stood at the claim (as getTask shows it), the lead first. */
  team?: WorkerView[];
  /** A worker's claim only: the transcript it saved when it last parked on approvals (it resumes from there). */
  parked?: ParkedState;
  /**
   * Turn 1's `firstPhase` is in the log: appended by this claim (a new attempt with nothing parked), or by the
   * first run of a claim ioredis sent again.
   */
  firstPhaseLogged: boolean;
}

type WorkerPhasePayload = Extract<TeamEventInput, { event_type: 'worker_phase' }>['payload'];

export type WorkerOutcome =
  | { outcome: 'completed'; result: string; usage: TokenUsage }
  | { outcome: 'failed' | 'released'; reason: string; message: string }
  | { outcome: 'waiting' };

export type TaskOutcome =
  | { status: 'completed'; result: string; usage: TokenUsage }
  | { status: 'failed'; reason: string };

export interface EventPage {
  workspace_id: string;
  status: TaskStatus;
  /** The task's updated_at (ms): its last event or change of status. */
  updated_ms: number;
  events: TeamEvent[];
}

const DEFAULT_MAX_EVENTS = 100_000;

/** The task registry and its event log: every write is one Lua script on the task's slot. */
export class TaskStore {
  readonly keys: KeyBuilder;
  readonly redis: RedisClient;
  private readonly scripts: StoreScripts;
  private readonly retentionSec: number;
  private readonly maxEvents: number;
  private readonly taskListMax: number;

  constructor(opts: TaskStoreOptions) {
    this.redis = opts.redis;
    this.keys = opts.keys ?? new KeyBuilder();
    this.scripts = scriptsOf(opts.redis);
    this.retentionSec = opts.retentionSec ?? DEFAULT_RETENTION_SEC;
    this.maxEvents = opts.maxEventsPerTask ?? DEFAULT_MAX_EVENTS;
    this.taskListMax = opts.taskListMaxEntries ?? TASK_LIST_MAX_ENTRIES;
  }

  private k(taskId: string): string[] {
    const k: TaskKeys = this.keys.task(taskId);
    return [k.meta, k.events, k.roster];
  }

  /**
   * Creates a task with its roster (the lead, plus the named workers) and its first event, in one script. With an
   * idempotency key the task id derives from workspace and key, so a repeated request finds the task the first one
   * created, and a refused or failed request leaves nothing behind that could claim the key.
   * The task is also marked as being enqueued (in the same round trip, before the script): the caller lists a new
   * task (listNew) and enqueues its jobs, then calls enqueued(); a gateway that dies in between leaves the mark for
   * the enqueue sweeper, which does both.
   */
  async createTask(input: NewTask, idempotencyKey?: string): Promise<{ task: TaskRecord; created: boolean }> {
    const taskId = idempotencyKey === undefined ? randomUUID() : idempotentTaskId(input.workspace_id, idempotencyKey);
    const mode = input.team.workers.length > 0 ? 'named' : 'planned';
    const roster: WorkerRecord[] = [
      { worker_id: LEAD_WORKER_ID, role: 'lead', instructions: input.team.lead.instructions, model: input.team.lead.model, tools: [], status: 'pending', attempt: 0 },
      ...input.team.workers.map((w, i) => ({ ...w, worker_id: workerIdFor(w.role, i + 1), status: 'pending' as const, attempt: 0 })),
    ];
    const fields = {
      task_id: taskId,
      workspace_id: input.workspace_id,
      goal: input.goal,
      mode,
      team: JSON.stringify(input.team),
      metadata: JSON.stringify(input.metadata),
    };
    // One connection, in order: the mark is written before the script runs, with no extra round trip.
    const [, created] = await Promise.all([
      this.redis.zadd(this.keys.tasksEnqueueing(), 'NX', Date.now(), taskId),
      this.scripts.createTask(
        ...this.k(taskId),
        taskId,
        JSON.stringify(fields),
        JSON.stringify(roster),
        JSON.stringify({ workspace_id: input.workspace_id, goal: input.goal }),
        this.maxEvents,
        this.keys.taskAppended(taskId),
      ),
    ]);
    if (created === 0) {
      // Created by an earlier request that died before answering (idempotent retry): read what it wrote.
      const task = await this.getTask(taskId);
      if (!task) throw new Error(`task ${taskId} vanished right after creation`);
      return { task, created: false };
    }
    const now = new Date(created).toISOString();
    const task: TaskRecord = {
      task_id: taskId, workspace_id: input.workspace_id, goal: input.goal, status: 'queued', mode, team: input.team, metadata: input.metadata,
      created_at: now, updated_at: now, started_at: null, finished_at: null, result: null, failure_reason: null, usage: null, last_seq: 1,
      workers: roster.map((w) => ({ worker_id: w.worker_id, role: w.role, status: 'pending', attempt: 0, host_id: null, result: null, failure_reason: null, usage: null })),
    };
    return { task, created: true };
  }

  /**
   * Lists a task createTask has just created in its workspace (index) and counts it as queued in the status stats.
   * Both are other slots than the task's (the workspace's, the global stats), so they follow the script; the caller
   * sends them beside the task's enqueue, which needs neither (one round trip for all three).
   */
  async listNew(task: TaskRecord): Promise<void> {
    await Promise.all([this.index(task.task_id, task.workspace_id, Date.parse(task.created_at)), this.redis.hincrby(this.keys.taskStats(), 'queued', 1)]);
  }

  /**
   * Lists an unfinished task again, without counting it: a creation that may have died before its listing (the
   * enqueue sweeper's, an Idempotency-Key retry's). The index is a set; a finished task stays out of it.
   */
  async relist(task: TaskRecord): Promise<void> {
    if (!TERMINAL_TASK_STATUSES.includes(task.status)) await this.index(task.task_id, task.workspace_id, Date.parse(task.created_at));
  }

  /** The task's jobs are in the queue: it no longer needs the enqueue sweeper. */
  async enqueued(taskId: string): Promise<void> {
    await this.redis.zrem(this.keys.tasksEnqueueing(), taskId);
  }

  /** Tasks whose creation began before `beforeMs` and that were not marked enqueued: the sweeper's work list. */
  async enqueueBacklog(beforeMs: number, limit: number): Promise<string[]> {
    return this.redis.zrangebyscore(this.keys.tasksEnqueueing(), '-inf', beforeMs, 'LIMIT', 0, limit);
  }

  /**
   * Lists a task in its workspace (listing index, unfinished set, the set of workspaces). Done after createTask,
   * and again by the enqueue sweeper for a task whose gateway died before it: doing it twice changes nothing.
   */
  async index(taskId: string, workspaceId: string, createdMs: number): Promise<void> {
    await Promise.all([
      this.scripts.indexTask(
        this.keys.workspaceTaskList(workspaceId), this.keys.workspaceTasks(workspaceId),
        listMember(createdMs, taskId), taskId, this.taskListMax, listMember(createdMs - this.retentionSec * 1000, ''),
      ),
      this.redis.sadd(this.keys.workspaces(), workspaceId),
    ]);
  }

  async getTask(taskId: string): Promise<TaskRecord | null> {
    const k = this.keys.task(taskId);
    const [meta, roster] = await this.redis
      .multi()
      .hgetall(k.meta)
      .hgetall(k.roster)
      .exec()
      .then((r) => {
        // No reply at all is a discarded transaction, not a missing task: "not found" is only what Redis answered.
        if (!r) throw new Error(`reading task ${taskId}: the transaction was discarded`);
        return r.map(([err, v]) => {
          if (err) throw err;
          return v as Record<string, string>;
        });
      });
    if (!meta || !meta.task_id) return null;
    return toTaskRecord(meta, roster ?? {});
  }

  /** What a watch needs to start: workspace (auth), status, last seq and updated_at (ms), in one read; null when there is no task. */
  async taskHead(taskId: string): Promise<{ workspace_id: string; status: TaskStatus; last_seq: number; updated_ms: number } | null> {
    const [workspaceId, status, seq, updated] = await this.redis.hmget(this.keys.task(taskId).meta, 'workspace_id', 'status', 'seq', 'updated_at');
    return workspaceId && status ? { workspace_id: workspaceId, status: status as TaskStatus, last_seq: Number(seq ?? 0), updated_ms: Number(updated ?? 0) } : null;
  }

  /** Whether the task has ended (completed, failed or cancelled); a task that is not there has not. */
  async hasEnded(taskId: string): Promise<boolean> {
    const status = await this.redis.hget(this.keys.task(taskId).meta, 'status');
    return status !== null && TERMINAL_TASK_STATUSES.includes(status as TaskStatus);
  }

  /** The workspace a task belongs to, or null when there is no such task: one cheap read for auth checks. */
  async workspaceOf(taskId: string): Promise<string | null> {
    return this.redis.hget(this.keys.task(taskId).meta, 'workspace_id');
  }

  async getWorker(taskId: string, workerId: string): Promise<WorkerRecord | null> {
    const raw = await this.redis.hget(this.keys.task(taskId).roster, workerId);
    return raw ? parseWorker(raw) : null;
  }

  /**
   * Takes the worker's attempt. In the same script the lead's claim also reads the roster (its workers' results),
   * a worker's its parked transcript, if any. `firstPhase` (workers only): the worker_phase its loop's first turn
   * would append, appended here when the attempt is new and has nothing parked to resume (see firstPhaseLogged).
   */
  async claimWorker(taskId: string, workerId: string, lease: string, hostId: string, firstPhase?: WorkerPhasePayload): Promise<ClaimResult> {
    const isLead = workerId === LEAD_WORKER_ID;
    const [code, attempt, worker, context, extra, phaseAppended] = await this.scripts.claimWorker(
      ...this.k(taskId), this.keys.taskApprovals(taskId).parked, taskId, workerId, lease, hostId, this.maxEvents, this.keys.taskAppended(taskId),
      isLead ? '1' : '0', firstPhase && !isLead ? JSON.stringify(firstPhase) : '',
    );
    if (code < 0) throw scriptError(code, `claim ${workerId}`);
    const task = JSON.parse(context!) as Omit<TaskContext, 'team'> & { team: string };
    return {
      kind: code === 1 ? 'started' : code === 2 ? 'resumed' : 'held',
      attempt,
      worker: parseWorker(worker!),
      task: { ...task, team: JSON.parse(task.team) as TaskContext['team'] },
      ...(isLead ? { team: workerViews(fieldsOf(extra as string[])) } : extra && { parked: JSON.parse(extra as string) as ParkedState }),
      firstPhaseLogged: phaseAppended === 1,
    };
  }

  /** worker_phase / worker_tool_call, written only while `lease` holds the worker's attempt. */
  async appendWorkerEvent<T extends 'worker_phase' | 'worker_tool_call'>(
    taskId: string,
    workerId: string,
    lease: string,
    eventType: T,
    payload: Extract<TeamEventInput, { event_type: T }>['payload'],
  ): Promise<number> {
    const seq = await this.scripts.appendWorkerEvent(
      ...this.k(taskId), taskId, workerId, lease, eventType, JSON.stringify(payload), this.maxEvents, this.keys.taskAppended(taskId),
    );
    if (seq < 0) throw scriptError(seq, `append ${eventType} for ${workerId}`);
    return seq;
  }

  /**
   * Ends the attempt holding `lease` (or, with lease '', a lost attempt); with `task`, ends the task too.
   * `workspaceId`, when the caller knows it, saves a read of it at the task's end.
   */
  async finishWorker(taskId: string, workerId: string, lease: string, outcome: WorkerOutcome, task?: TaskOutcome, workspaceId?: string): Promise<number> {
    const payload =
      outcome.outcome === 'completed'
        ? { result: outcome.result, usage: outcome.usage }
        : outcome.outcome === 'waiting'
          ? {}
          : { reason: outcome.reason, message: outcome.message };
    const taskPayload = task === undefined ? {} : task.status === 'completed' ? { result: task.result, usage: task.usage } : { reason: task.reason };
    const seq = await this.scripts.finishWorker(
      ...this.k(taskId), taskId, workerId, lease, outcome.outcome, JSON.stringify(payload),
      task?.status ?? '', JSON.stringify(taskPayload), this.retentionSec, this.maxEvents, this.keys.taskAppended(taskId),
    );
    if (seq < 0) throw scriptError(seq, `finish ${workerId}`);
    if (task) await this.taskEnded(taskId, task.status, workspaceId);
    return seq;
  }

  /** Adds spawned workers (pending) to the roster, fenced by the lead's lease. */
  async addWorkers(taskId: string, leadLease: string, workers: WorkerRecord[]): Promise<number> {
    const added = await this.scripts.addWorkers(...this.k(taskId), LEAD_WORKER_ID, leadLease, JSON.stringify(workers));
    if (added < 0) throw scriptError(added, 'add workers');
    return added;
  }

  /** Cancels the task; 'already' when it was cancelled before. Completed or failed tasks throw task_finished. */
  async cancelTask(taskId: string, reason: string): Promise<'cancelled' | 'already'> {
    const code = await this.scripts.cancelTask(
      ...this.k(taskId), this.keys.taskApprovals(taskId).approvals, taskId, reason, this.retentionSec, this.maxEvents, this.keys.taskAppended(taskId), this.keys.cancelChannel(),
    );
    if (code === 1) {
      await this.taskEnded(taskId, 'cancelled');
      return 'cancelled';
    }
    if (code === 2) return 'already';
    throw scriptError(code, 'cancel');
  }

  /**
   * Events with seq > afterSeq, at most `limit`, with the task's workspace and status read in the same round
   * trip. A cursor before the oldest retained event throws cursor_expired (never a silent gap); one past the last
   * event throws cursor_ahead.
   */
  async readEvents(taskId: string, afterSeq: number, limit: number): Promise<EventPage | null> {
    const k = this.keys.task(taskId);
    const replies = await this.redis
      .multi()
      .hmget(k.meta, 'workspace_id', 'status', 'seq', 'updated_at')
      .xrange(k.events, `(${afterSeq}-0`, '+', 'COUNT', limit)
      .exec();
    const [[metaErr, meta], [rangeErr, entries]] = replies as [[Error | null, (string | null)[]], [Error | null, StreamEntry[]]];
    if (metaErr) throw metaErr;
    if (rangeErr) throw rangeErr;
    const [workspaceId, status, seq, updated] = meta;
    if (!workspaceId || !status) return null;
    const events = entries.map(decodeEntry);
    checkCursor(afterSeq, Number(seq ?? 0), events[0]?.seq, 'task');
    return { workspace_id: workspaceId, status: status as TaskStatus, updated_ms: Number(updated ?? 0), events };
  }

  /** The task's log as the fan-out reads it. Its id is the task id (what the append scripts publish). */
  taskLog(taskId: string): WatchableLog<TeamEvent> {
    return {
      id: taskId,
      channel: this.keys.taskAppended(taskId),
      decode: decodeEntry,
      read: async (afterSeq, limit) => (await this.readEvents(taskId, afterSeq, limit))?.events ?? null,
      readLive: async (afterSeq, limit) => ((await this.redis.xrange(this.keys.task(taskId).events, `(${afterSeq}-0`, '+', 'COUNT', limit)) as StreamEntry[]).map(decodeEntry),
      head: async () => Number((await this.redis.hget(this.keys.task(taskId).meta, 'seq')) ?? 0),
      headAndPage: (afterSeq, limit) => readHeadAndPage(this.redis, this.keys.task(taskId).meta, this.keys.task(taskId).events, decodeEntry, afterSeq, limit),
      isTerminal: (event) => isTerminalTeamEvent(event.event_type),
    };
  }

  /** A workspace's tasks, newest first; `afterMember` is a decoded cursor (see task-list.ts). */
  listTasks(workspaceId: string, opts: { status?: TaskStatus; afterMember?: string; limit: number }): Promise<TaskListPage> {
    return listTasks(this.redis, this.keys, workspaceId, opts);
  }

  /** The workspaces that have had tasks, runs or approvals (the set stop-all goes through). */
  async workspaceIds(): Promise<string[]> {
    return (await this.redis.smembers(this.keys.workspaces())).sort();
  }

  /** Unfinished tasks of a workspace (for stop-all). */
  async activeTaskIds(workspaceId: string): Promise<string[]> {
    return this.redis.smembers(this.keys.workspaceTasks(workspaceId));
  }

  /**
   * A page of a workspace's unfinished tasks (SSCAN: `cursor` '0' starts the walk, and `next` '0' ends it; a task
   * may come twice in one walk). For walks over sets too large to read at once (the task reconciler's).
   */
  async activeTaskPage(workspaceId: string, cursor: string, count: number): Promise<{ next: string; taskIds: string[] }> {
    const [next, taskIds] = await this.redis.sscan(this.keys.workspaceTasks(workspaceId), cursor, 'COUNT', count);
    return { next, taskIds };
  }

  /** Takes the task reconciler's turn for `ms` (SET NX PX): true for the one process that got it. */
  async takeReconcileTurn(holder: string, ms: number): Promise<boolean> {
    return (await this.redis.set(this.keys.tasksReconcileTurn(), holder, 'PX', ms, 'NX')) === 'OK';
  }

  /** Where the task reconciler's walk goes on (its own JSON), kept for whichever process takes the next turn. */
  async reconcilePlace(): Promise<string | null> {
    return this.redis.get(this.keys.tasksReconcilePlace());
  }

  async setReconcilePlace(place: string): Promise<void> {
    await this.redis.set(this.keys.tasksReconcilePlace(), place);
  }

  /** Takes a task that has ended, or whose record is gone, out of its workspace's unfinished set. */
  async unlistUnfinished(workspaceId: string, taskId: string): Promise<void> {
    await this.redis.srem(this.keys.workspaceTasks(workspaceId), taskId);
  }

  /** Which of these tasks are still marked as being enqueued (their creation's enqueue is the enqueue sweeper's). */
  async beingEnqueued(taskIds: readonly string[]): Promise<Set<string>> {
    if (taskIds.length === 0) return new Set();
    const scores = await this.redis.zmscore(this.keys.tasksEnqueueing(), ...taskIds);
    return new Set(taskIds.filter((_, i) => scores[i] !== null));
  }

  /**
   * Bookkeeping outside the task's slot, so separate writes (two slots: sent together, not as one pipeline): the count of tasks that reached each status (for
   * metrics) and the workspace's set of unfinished tasks.
   */
  private async taskEnded(taskId: string, status: TaskStatus, workspaceId?: string): Promise<void> {
    const ws = workspaceId ?? (await this.workspaceOf(taskId));
    await Promise.all([this.redis.hincrby(this.keys.taskStats(), status, 1), ws ? this.redis.srem(this.keys.workspaceTasks(ws), taskId) : 0]);
  }

  async statusCounts(): Promise<Record<string, number>> {
    const raw = await this.redis.hgetall(this.keys.taskStats());
    return Object.fromEntries(Object.entries(raw).map(([k, v]) => [k, Number(v)]));
  }
}

/**
 * The id of the task an Idempotency-Key creates in a workspace: a UUID (version 8, RFC 9562's custom layout) made
 * from a SHA-256 of both, so a retry names the same task without any other key.
 */
export function idempotentTaskId(workspaceId: string, idempotencyKey: string): string {
  const hex = createHash('sha256').update(`${workspaceId}\n${idempotencyKey}`).digest('hex');
  const variant = ((parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

export function workerIdFor(role: string, index: number): string {
  const slug = role.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '').slice(0, 40) || 'worker';
  return `${slug}-${index}`;
}

function parseWorker(raw: string): WorkerRecord {
  const w = JSON.parse(raw) as WorkerRecord;
  // Lua's cjson turns an empty array into {}: normalise on the way out.
  if (!Array.isArray(w.tools)) w.tools = [];
  return w;
}

const iso = (ms: string | undefined): string | null => (ms ? new Date(Number(ms)).toISOString() : null);

/** A roster hash (worker_id → worker JSON) as the task's views show it: the lead first, then in spawn order. */
function workerViews(roster: Record<string, string>): WorkerView[] {
  return Object.values(roster)
    .map(parseWorker)
    .sort(byRosterOrder)
    .map((w) => ({
      worker_id: w.worker_id,
      role: w.role,
      status: w.status === 'waiting' ? 'running' : w.status,
      attempt: w.attempt,
      host_id: w.host_id ?? null,
      result: w.result ?? null,
      failure_reason: w.failure_reason ?? null,
      usage: w.usage && 'total_tokens' in w.usage ? w.usage : null,
    }));
}

function toTaskRecord(meta: Record<string, string>, roster: Record<string, string>): TaskRecord {
  const workers = workerViews(roster);
  const usage = meta.usage ? (JSON.parse(meta.usage) as TokenUsage) : null;
  return {
    task_id: meta.task_id!,
    workspace_id: meta.workspace_id!,
    goal: meta.goal!,
    status: meta.status as TaskStatus,
    mode: meta.mode as TaskRecord['mode'],
    team: JSON.parse(meta.team!),
    metadata: JSON.parse(meta.metadata ?? '{}'),
    created_at: iso(meta.created_at)!,
    updated_at: iso(meta.updated_at)!,
    started_at: iso(meta.started_at),
    finished_at: iso(meta.finished_at),
    result: meta.result || null,
    failure_reason: meta.failure_reason || null,
    usage: usage && 'total_tokens' in usage ? usage : null,
    last_seq: Number(meta.seq ?? 0),
    workers,
  };
}

/** The lead first, then workers by their number (`critic-2` after `researcher-1`). */
function byRosterOrder(a: WorkerRecord, b: WorkerRecord): number {
  if (a.worker_id === LEAD_WORKER_ID) return -1;
  if (b.worker_id === LEAD_WORKER_ID) return 1;
  return numberOf(a.worker_id) - numberOf(b.worker_id) || a.worker_id.localeCompare(b.worker_id);
}
const numberOf = (id: string): number => Number(/-(\d+)$/.exec(id)?.[1] ?? 0);


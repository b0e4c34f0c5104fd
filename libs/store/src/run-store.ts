import { randomUUID } from 'node:crypto';
import type { RedisClient } from './connect.ts';
import { readHeadAndPage, type WatchableLog } from './event-fanout.ts';
import { approvalDecided, checkCursor, scriptError, SCRIPT_ERRORS, StoreError } from './errors.ts';
import type { KeyBuilder } from './keys.ts';
import { scriptsOf, type StoreScripts } from './scripts.ts';
import { readEntry, type StreamEntry } from './event-codec.ts';
import { DEFAULT_RETENTION_SEC } from '@cadre/config';
import { compareApprovals, runOfApproval, type ApprovalRecord, type ApprovalsDecided } from './approval-store.ts';
import { RecentMap } from './recent-map.ts';
import {
  TERMINAL_RUN_STATUSES,
  type AssignedRun,
  type ControlAction,
  type ControlCommand,
  type HeartbeatInput,
  type NewRun,
  type RelayedEvent,
  type RunEvent,
  type RunRecord,
  type RunStatus,
  type RunWorker,
  type VmWorker,
} from '@cadre/protocol';

export interface RunStoreOptions {
  redis: RedisClient;
  /**
   * The connection heartbeats go over (default `redis`). The gateway gives them one without autopipelining: a
   * heartbeat is one script call that waits on nothing else, and an autopipelined call costs a pipeline and its
   * promises per batch, about 1.5 KB of garbage per heartbeat (bench/heartbeat-cost.ts).
   */
  heartbeatRedis?: RedisClient;
  keys: KeyBuilder;
  retentionSec?: number;
  maxEventsPerRun?: number;
  /** A bound run whose worker has not heartbeated for this long goes back to the queue. */
  workerTtlMs?: number;
  /** Lost workers after which a run fails. */
  maxAttempts?: number;
  /** Hears of each approval decided here (approved, denied, expired; cancelled with its run's stop or lost lease): metrics. */
  onDecided?: ApprovalsDecided;
}

/** What a write to one run answers, as the original: the run and the event the write appended. */
export interface RunWithEvent {
  run: RunRecord;
  latest_event: RunEvent;
}

export interface HeartbeatResult {
  worker: VmWorker;
  assigned_run: AssignedRun | null;
  control_commands: ControlCommand[];
}

const iso = (ms: string | number | undefined | null): string | null => (ms ? new Date(Number(ms)).toISOString() : null);
const orNull = (s: string | undefined): string | null => (s ? s : null);
/** Lua's cjson writes an empty list as {}: read lists defensively. */
const list = <T>(v: unknown): T[] => (Array.isArray(v) ? (v as T[]) : []);

/** The runs control plane's state: every write is one Lua script on the workspace's slot. */
export class RunStore {
  readonly keys: KeyBuilder;
  readonly redis: RedisClient;
  private readonly scripts: StoreScripts;
  private readonly heartbeatScripts: StoreScripts;
  private readonly retentionSec: number;
  private readonly maxEvents: number;
  readonly workerTtlMs: number;
  readonly maxAttempts: number;
  private readonly onDecided: ApprovalsDecided | undefined;
  /** run id → workspace; immutable, so remembered (bounded). */
  private readonly workspaceCache = new RecentMap<string, string>(10_000);
  /** Leases this process's heartbeats and sweeps expired, and the runs they put back in the queue (metrics). */
  leaseExpiries = 0;
  requeues = 0;
  /** Heartbeats this process handled (metrics). */
  heartbeats = 0;

  constructor(opts: RunStoreOptions) {
    this.redis = opts.redis;
    this.keys = opts.keys;
    this.scripts = scriptsOf(opts.redis);
    this.heartbeatScripts = opts.heartbeatRedis ? scriptsOf(opts.heartbeatRedis) : this.scripts;
    this.retentionSec = opts.retentionSec ?? DEFAULT_RETENTION_SEC;
    this.maxEvents = opts.maxEventsPerRun ?? 100_000;
    this.workerTtlMs = opts.workerTtlMs ?? 30_000;
    this.maxAttempts = opts.maxAttempts ?? 3;
    this.onDecided = opts.onDecided;
  }

  /** KEYS of every run script: the workspace's workers hash, whose base the scripts derive the rest from. */
  private route(workspaceId: string): [string] {
    return [this.keys.workspaceWorkers(workspaceId)];
  }

  async createRun(input: NewRun, cap: number, idempotencyKey?: string): Promise<{ run: RunRecord; events: RunEvent[]; created: boolean }> {
    let runId: string = randomUUID();
    if (idempotencyKey !== undefined) {
      const idem = this.keys.runIdempotency(input.workspace_id, idempotencyKey);
      if ((await this.redis.set(idem, runId, 'EX', this.retentionSec, 'NX')) === null) {
        const existing = await this.redis.get(idem);
        const run = existing ? await this.getRun(existing) : null;
        if (run) return { run, events: (await this.readEvents(run.run_id, 0, 1000))?.events ?? [], created: false };
        if (existing) runId = existing;
      }
    }
    // The index first: a run must never exist without a way to find its workspace. Two slots, so two commands.
    await Promise.all([this.redis.set(this.keys.runIndex(runId), input.workspace_id), this.redis.sadd(this.keys.workspaces(), input.workspace_id)]);
    const fields = {
      workspace_id: input.workspace_id,
      agent_id: input.agent_id ?? '',
      query: input.query,
      requested_by: input.requested_by ?? '',
      files: JSON.stringify(input.files),
      metadata: JSON.stringify(input.metadata),
    };
    // As the original: the creator may name the conversation in metadata.conversation_ref.
    const named = input.metadata.conversation_ref;
    const conversationRef = typeof named === 'string' ? named.trim().slice(0, 160) : '';
    const code = await this.scripts.createRun(...this.route(input.workspace_id), runId, JSON.stringify(fields), cap, this.maxEvents, this.keys.runsAppended(input.workspace_id), conversationRef);
    if (code < 0) {
      await this.redis.del(this.keys.runIndex(runId));
      if (idempotencyKey !== undefined) await this.redis.del(this.keys.runIdempotency(input.workspace_id, idempotencyKey));
      throw scriptError(code, 'create run');
    }
    const run = await this.getRun(runId);
    if (!run) throw new Error(`run ${runId} vanished right after creation`);
    return { run, events: (await this.readEvents(runId, 0, 1000))?.events ?? [], created: code === 1 };
  }

  async workspaceOf(runId: string): Promise<string | null> {
    const cached = this.workspaceCache.get(runId);
    if (cached) return cached;
    const ws = await this.redis.get(this.keys.runIndex(runId));
    if (ws) this.workspaceCache.set(runId, ws);
    return ws;
  }

  private metaKey(ws: string, runId: string): string {
    return this.keys.run(ws, runId).meta;
  }

  private eventsKey(ws: string, runId: string): string {
    return this.keys.run(ws, runId).events;
  }

  /** The run and the event at `seq`, read in one round trip (what every write to a run answers). */
  private async runWithEvent(ws: string, runId: string, seq: number): Promise<RunWithEvent> {
    const replies = await this.redis.multi().hgetall(this.metaKey(ws, runId)).xrange(this.eventsKey(ws, runId), `${seq}-0`, `${seq}-0`).exec();
    const [[e1, meta], [e2, entries]] = replies as [[Error | null, Record<string, string>], [Error | null, StreamEntry[]]];
    if (e1 || e2) throw e1 ?? e2;
    if (!meta.run_id) throw new StoreError('run_not_found', 'run not found');
    const entry = entries[0];
    if (!entry) throw new Error(`run ${runId}: event ${seq} was not recorded`);
    return { run: toRunRecord(meta), latest_event: decodeRunEntry(entry) };
  }

  async getRun(runId: string): Promise<RunRecord | null> {
    const ws = await this.workspaceOf(runId);
    if (!ws) return null;
    const meta = await this.redis.hgetall(this.metaKey(ws, runId));
    return meta.run_id ? toRunRecord(meta) : null;
  }

  /** Runs of a workspace, newest first, optionally by status: every active run, and the newest 1,000 of the rest. */
  async listRuns(workspaceId: string, status?: RunStatus): Promise<RunRecord[]> {
    const keys = this.keys.workspaceRuns(workspaceId);
    const [active, recent] = await Promise.all([this.redis.smembers(keys.active), this.redis.zrevrange(keys.listing, 0, 999)]);
    const ids = [...new Set([...active, ...recent])];
    const pipeline = this.redis.pipeline();
    for (const id of ids) pipeline.hgetall(this.metaKey(workspaceId, id));
    const metas = ((await pipeline.exec()) ?? []).map(([, m]) => m as Record<string, string>);
    return metas
      .filter((m) => m.run_id)
      .map(toRunRecord)
      .filter((r) => !status || r.status === status)
      .sort((a, b) => b.created_at.localeCompare(a.created_at));
  }

  async readEvents(runId: string, afterSeq: number, limit: number): Promise<{ workspace_id: string; events: RunEvent[] } | null> {
    const ws = await this.workspaceOf(runId);
    if (!ws) return null;
    const replies = await this.redis.multi().hmget(this.metaKey(ws, runId), 'run_id', 'seq').xrange(this.eventsKey(ws, runId), `(${afterSeq}-0`, '+', 'COUNT', limit).exec();
    const [[e1, meta], [e2, entries]] = replies as [[Error | null, (string | null)[]], [Error | null, StreamEntry[]]];
    if (e1 || e2) throw e1 ?? e2;
    const [exists, seq] = meta;
    if (!exists) return null;
    const events = entries.map(decodeRunEntry);
    checkCursor(afterSeq, Number(seq ?? 0), events[0]?.seq, 'run');
    return { workspace_id: ws, events };
  }

  runLog(runId: string, workspaceId: string): WatchableLog<RunEvent> {
    return {
      id: `run:${runId}`,
      channel: this.keys.runsAppended(workspaceId),
      decode: decodeRunEntry,
      read: async (afterSeq, limit) => (await this.readEvents(runId, afterSeq, limit))?.events ?? null,
      head: async () => Number((await this.redis.hget(this.metaKey(workspaceId, runId), 'seq')) ?? 0),
      headAndPage: (afterSeq, limit) => readHeadAndPage(this.redis, this.metaKey(workspaceId, runId), this.eventsKey(workspaceId, runId), decodeRunEntry, afterSeq, limit),
      isTerminal: (e) => e.event_type === 'streaming-complete' || e.event_type === 'error' || (e.event_type === 'run-control' && (e.payload as { action?: string })?.action === 'stop'),
    };
  }

  /**
   * One heartbeat: one script call. `acked` switches the worker to acknowledged delivery (commands are
   * redelivered until acked); without it each command is delivered once, as the original API did.
   */
  async heartbeat(input: HeartbeatInput, acked: string[] | undefined): Promise<HeartbeatResult> {
    // Unset strings travel as '' (Lua's cjson turns JSON null into a value that is truthy there).
    const worker = { ...input, vm_id: input.vm_id ?? '', user_id: input.user_id ?? '', session_id: input.session_id ?? '', agent_id: input.agent_id ?? '' };
    const raw = await this.heartbeatScripts.heartbeat(
      ...this.route(input.workspace_id),
      JSON.stringify(worker),
      this.workerTtlMs,
      this.maxAttempts,
      acked === undefined ? '' : JSON.stringify(acked),
      this.maxEvents,
      this.keys.runsAppended(input.workspace_id),
      this.retentionSec,
    );
    const out = JSON.parse(raw) as { worker: Record<string, unknown>; assigned_run?: Record<string, string>; commands: unknown; lost?: number; requeued?: number; cancelled_approvals?: unknown };
    this.heartbeats++;
    this.leaseExpiries += out.lost ?? 0;
    this.requeues += out.requeued ?? 0;
    this.cancelledApprovals(out.cancelled_approvals);
    return {
      worker: toVmWorker(out.worker),
      assigned_run: out.assigned_run ? toAssignedRun(out.assigned_run) : null,
      control_commands: list<string>(out.commands).map((c) => toCommand(JSON.parse(c))),
    };
  }

  /** The holder's dispatch ack; `payload` fields the worker did not send are null. */
  async dispatch(runId: string, workerId: string, leaseId: string | undefined, payload: { user_id: string | null; turn_ref: string | null; conversation_ref: string | null }): Promise<RunWithEvent> {
    const ws = await this.requireWorkspace(runId);
    const seq = await this.scripts.dispatchRun(...this.route(ws), runId, workerId, leaseId ?? '', JSON.stringify(payload), this.maxEvents, this.keys.runsAppended(ws));
    if (seq < 0) throw scriptError(seq, 'worker-dispatched');
    return this.runWithEvent(ws, runId, seq);
  }

  async relay(runId: string, workerId: string | undefined, leaseId: string | undefined, events: RelayedEvent[], batchId?: string): Promise<RunWithEvent & { last_seq: number }> {
    const ws = await this.requireWorkspace(runId);
    const encoded = events.map((e) => [e.event_type, e.source ?? 'worker-stream', JSON.stringify(e.payload ?? {}), errorText(e.payload)]);
    const seq = await this.scripts.relayRunEvents(...this.route(ws), runId, workerId ?? '', leaseId ?? '', JSON.stringify(encoded), this.maxEvents, this.keys.runsAppended(ws), this.retentionSec, batchId ?? '');
    if (seq < 0) throw scriptError(seq, 'relay events');
    const out = await this.runWithEvent(ws, runId, seq);
    if (isTerminalRunStatus(out.run.status)) await this.indexEnds([runId]);
    return { ...out, last_seq: seq };
  }

  async control(runId: string, action: ControlAction, controlMode: string | undefined, requestedBy: string): Promise<RunWithEvent> {
    const ws = await this.requireWorkspace(runId);
    const [seq, cancelled] = await this.scripts.controlRun(...this.route(ws), runId, action, controlMode ?? '', requestedBy, `cmd-${randomUUID()}`, this.maxEvents, this.keys.runsAppended(ws), this.retentionSec);
    if (seq < 0) throw scriptError(seq, action);
    this.cancelledApprovals(cancelled);
    const out = await this.runWithEvent(ws, runId, seq);
    if (out.run.status === 'stopped') await this.indexEnds([runId]);
    return out;
  }

  /** Every workspace that has had a run (or a team task: stop-all covers both). */
  async workspaceIds(): Promise<string[]> {
    return this.redis.smembers(this.keys.workspaces());
  }

  /** Stops every active run in one workspace, or in every workspace. */
  async stopAll(workspaceId: string | undefined, requestedBy: string): Promise<string[]> {
    const workspaces = workspaceId ? [workspaceId] : await this.workspaceIds();
    const stopped = await Promise.all(
      workspaces.map((ws) => this.scripts.stopAllRuns(...this.route(ws), requestedBy, `stop-all-${randomUUID()}`, this.maxEvents, this.keys.runsAppended(ws), this.retentionSec)),
    );
    const ids = stopped.flatMap(([batch]) => list<string>(batch));
    this.cancelledApprovals(stopped.flatMap(([, cancelled]) => list<string>(cancelled)));
    await this.indexEnds(ids);
    return ids;
  }

  /**
   * A finished run's index entry (run id → workspace) goes with its keys, after the same retention. It lives in
   * the run id's own slot, so the scripts that finish a run cannot expire it; runs failed by the lease sweeper
   * keep theirs (a small string per run).
   */
  private async indexEnds(runIds: string[]): Promise<void> {
    // Each index entry has its own slot: sent together, never as one pipeline (a Cluster refuses one across nodes).
    await Promise.all(runIds.map((id) => this.redis.expire(this.keys.runIndex(id), this.retentionSec)));
  }

  /** The lease sweeper's pass: every workspace, one script each. */
  async expireLeases(): Promise<number> {
    const workspaces = await this.workspaceIds();
    const counts = await Promise.all(
      workspaces.map((ws) => this.scripts.expireRunLeases(...this.route(ws), this.maxAttempts, this.maxEvents, this.keys.runsAppended(ws), this.retentionSec)),
    );
    let lost = 0;
    for (const [expired, requeued, cancelled] of counts) {
      lost += expired;
      this.requeues += requeued;
      this.cancelledApprovals(cancelled);
    }
    this.leaseExpiries += lost;
    return lost;
  }

  /** Unfinished runs by status over every workspace, for metrics (cheap: each workspace caps its active runs). */
  async activeStatusCounts(): Promise<Record<string, number>> {
    const workspaces = await this.workspaceIds();
    const perWorkspace = await Promise.all(workspaces.map(async (ws) => {
      const ids = await this.redis.smembers(this.keys.workspaceRuns(ws).active);
      return Promise.all(ids.map((id) => this.redis.hget(this.keys.run(ws, id).meta, 'status')));
    }));
    const counts: Record<string, number> = {};
    for (const status of perWorkspace.flat()) if (status) counts[status] = (counts[status] ?? 0) + 1;
    return counts;
  }

  /**
   * The holder's tool calls that need a decision become the run's pending approvals (records built by the
   * caller, in the model's order). Throws run_not_found / run_finished / worker_mismatch.
   */
  async askApprovals(runId: string, workerId: string, leaseId: string, records: readonly ApprovalRecord[]): Promise<void> {
    const ws = await this.requireWorkspace(runId);
    const seq = await this.scripts.askRunApprovals(...this.route(ws), runId, workerId, leaseId, JSON.stringify(records), this.maxEvents, this.keys.runsAppended(ws), this.retentionSec);
    if (seq < 0) throw scriptError(seq, 'ask for approval');
  }

  /** The workspace's active runs (not stopped, completed or failed): where pending approvals can be. */
  async activeRunIds(workspaceId: string): Promise<string[]> {
    return this.redis.smembers(this.keys.workspaceRuns(workspaceId).active);
  }

  /** The run's approvals, in the inbox's order; [] for an unknown run. */
  async approvals(runId: string): Promise<ApprovalRecord[]> {
    const ws = await this.workspaceOf(runId);
    if (!ws) return [];
    const raws = await this.redis.hvals(this.keys.runApprovals(ws, runId));
    return raws.map((r) => JSON.parse(r) as ApprovalRecord).sort(compareApprovals);
  }

  /** Reports the approvals a run script cancelled (records' JSON) as decisions, as it reports its own. */
  private cancelledApprovals(raw: unknown): void {
    const records = list<string>(raw).map((r) => JSON.parse(r) as ApprovalRecord);
    if (records.length > 0) this.onDecided?.(records);
  }

  /** Decides a run's pending approval once; throws approval_not_found / approval_decided. */
  async decideApproval(approvalId: string, status: 'approved' | 'denied' | 'expired', reason: string, decidedBy: string, modifier?: string): Promise<ApprovalRecord> {
    const runId = runOfApproval(approvalId);
    const ws = runId ? await this.workspaceOf(runId) : null;
    if (!runId || !ws) throw new StoreError('approval_not_found', `no approval ${approvalId}`);
    const [code, raw] = await this.scripts.decideRunApproval(...this.route(ws), runId, approvalId, status, reason, decidedBy, Date.now(), this.maxEvents, this.keys.runsAppended(ws), modifier ?? '');
    if (code === SCRIPT_ERRORS.approval_decided.code) throw approvalDecided(approvalId, (JSON.parse(raw!) as ApprovalRecord).status);
    if (code < 0) throw scriptError(code, `approval ${approvalId}`);
    const record = JSON.parse(raw!) as ApprovalRecord;
    this.onDecided?.([record]);
    return record;
  }

  private async requireWorkspace(runId: string): Promise<string> {
    const ws = await this.workspaceOf(runId);
    if (!ws) throw new StoreError('run_not_found', 'run not found');
    return ws;
  }
}

/** The message of a relayed `error`: at the top of its payload, or inside the original's `{payload: {...}}` envelope. */
function errorText(payload: unknown, depth = 0): string {
  if (payload && typeof payload === 'object') {
    const p = payload as Record<string, unknown>;
    for (const k of ['message', 'error', 'detail']) if (typeof p[k] === 'string' && p[k] !== '') return (p[k] as string).slice(0, 1000);
    if (depth === 0 && 'payload' in p) return errorText(p.payload, 1);
  }
  if (depth === 1 && typeof payload === 'string' && payload !== '') return payload.slice(0, 1000);
  return 'worker reported an error';
}

/** A run log entry (lua/includes/run-log.lua): also s source. */
function decodeRunEntry(entry: StreamEntry): RunEvent {
  const { fields, ...event } = readEntry(entry);
  return { ...event, source: fields.s ?? 'backend' } as RunEvent;
}

function toRunRecord(m: Record<string, string>): RunRecord {
  return {
    run_id: m.run_id!,
    workspace_id: m.workspace_id!,
    agent_id: orNull(m.agent_id),
    conversation_ref: m.conversation_ref!,
    query_message_id: orNull(m.turn_ref),
    query: m.query ?? '',
    requested_by: orNull(m.requested_by),
    files: JSON.parse(m.files ?? '[]'),
    metadata: JSON.parse(m.metadata ?? '{}'),
    status: m.status as RunStatus,
    control_mode: m.control_mode as RunRecord['control_mode'],
    worker: m.worker ? toRunWorker(JSON.parse(m.worker)) : null,
    created_at: iso(m.created_at)!,
    updated_at: iso(m.updated_at)!,
    last_heartbeat_at: iso(m.last_heartbeat_at),
    last_event_seq: Number(m.seq ?? 0),
    attempts: Number(m.attempts ?? 0),
    assigned_at: iso(m.assigned_at),
    dispatched_at: iso(m.dispatched_at),
    finished_at: iso(m.finished_at),
    error: orNull(m.error),
  };
}

function toRunWorker(w: Record<string, unknown>): RunWorker {
  return { ...(w as unknown as RunWorker), metadata: objectOr(w.metadata), last_heartbeat_at: iso(w.last_heartbeat_at as number)! };
}

/** Lua's cjson writes an empty object as []: read objects defensively. */
const objectOr = (v: unknown): Record<string, unknown> => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {});

/** A worker field the script sends as '' when unset. */
const setOrNull = (v: unknown): string | null => (typeof v === 'string' && v !== '' ? v : null);

function toVmWorker(w: Record<string, unknown>): VmWorker {
  return {
    worker_id: w.worker_id as string,
    workspace_id: w.workspace_id as string,
    vm_id: setOrNull(w.vm_id),
    user_id: setOrNull(w.user_id),
    session_id: setOrNull(w.session_id),
    agent_id: setOrNull(w.agent_id),
    status: w.status as string,
    metadata: objectOr(w.metadata),
    last_heartbeat_at: iso(w.last_heartbeat_at as number)!,
    current_run_id: setOrNull(w.run_id),
  };
}

function toAssignedRun(m: Record<string, string>): AssignedRun {
  return {
    run_id: m.run_id!,
    workspace_id: m.workspace_id!,
    agent_id: orNull(m.agent_id),
    conversation_ref: m.conversation_ref!,
    query: m.query ?? '',
    requested_by: orNull(m.requested_by),
    files: JSON.parse(m.files ?? '[]'),
    metadata: JSON.parse(m.metadata ?? '{}'),
    control_mode: m.control_mode as AssignedRun['control_mode'],
    lease_id: m.lease_id!,
  };
}

function toCommand(c: Record<string, unknown>): ControlCommand {
  return { ...(c as unknown as ControlCommand), requested_by: typeof c.requested_by === 'string' ? c.requested_by : null, created_at: iso(c.created_at as number)! };
}

export function isTerminalRunStatus(status: RunStatus): boolean {
  return TERMINAL_RUN_STATUSES.includes(status);
}

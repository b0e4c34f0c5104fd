import { randomBytes } from 'node:crypto';
import type { RedisClient } from './connect.ts';
import type { ApprovalScope, ApprovalStatus } from '@cadre/protocol';
import type { WatchableLog } from './event-fanout.ts';
import { readEntry, type StreamEntry } from './event-codec.ts';
import { KeyBuilder } from './keys.ts';
import { approvalDecided, checkCursor, scriptError, SCRIPT_ERRORS, StoreError } from './errors.ts';
import { scriptsOf, type StoreScripts } from './scripts.ts';
import { approvalGrant, type ApprovalPolicy } from './approval-policy.ts';
import { DEFAULT_RETENTION_SEC } from '@cadre/config';

export {
  DEFAULT_APPROVAL_TIMEOUT_SECS, evaluatePolicy, globMatches, type ApprovalPolicy, type ApprovalRule, type PolicyVerdict,
} from './approval-policy.ts';

export interface ApprovalRecord {
  approval_id: string;
  workspace_id: string;
  task_id: string;
  worker_id: string;
  call_id: string;
  tool_name: string;
  arguments: string;
  reason: string;
  timeout_secs: number;
  status: ApprovalStatus;
  /** ms since the epoch */
  created_at: number;
  expires_at: number;
  decided_at?: number;
  /** The deciding key's name ('' for a timeout or a cancel), never the key. */
  decided_by?: string;
  decision_reason?: string;
  /** The amended arguments (a JSON object's text) an approver ran the call with. */
  modifier?: string;
  /** `task`: the approval also covers later calls of the same tool and arguments in the task. */
  scope?: ApprovalScope;
  /** The call's place among its turn's calls (the model's order), from 0. */
  order?: number;
  /** A VM run's approval: the run (task_id is '' and worker_id the VM worker that asked). */
  run_id?: string;
  /** A VM run's call: its tool's parameter schema (JSON text) as the vm-agent sent it, which a modifier must fit. */
  parameters_schema?: string;
}

/** One entry of a workspace's approvals inbox log: a record as it was at one of its transitions. */
export interface ApprovalInboxEvent {
  seq: number;
  timestamp: string;
  event_type: 'approval_requested' | 'approval_decided';
  payload: ApprovalRecord;
}

/** The inbox's stable order (oldest first, then by id) and its opaque cursor: the last record a page held. */
/** What the inbox orders by: when asked, then whose (task or session), then the call's place in its turn. */
export interface ApprovalPosition {
  created_at: number;
  task_id: string;
  session_id?: string;
  run_id?: string;
  order?: number;
  approval_id: string;
}

/**
 * The inbox's stable order: oldest first; the calls of one turn (asked in the same millisecond) in the model's
 * order; then by id.
 */
export function compareApprovals(x: ApprovalPosition, y: ApprovalPosition): number {
  const text = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
  return x.created_at - y.created_at || text(ownerOf(x), ownerOf(y)) || (x.order ?? 0) - (y.order ?? 0) || text(x.approval_id, y.approval_id);
}

const ownerOf = (a: ApprovalPosition): string => a.session_id || a.run_id || a.task_id;

/** The opaque cursor of the inbox: the position of the last record a page held. */
export function encodeApprovalCursor(last: ApprovalPosition): string {
  return Buffer.from(`${last.created_at}:${ownerOf(last)}:${last.order ?? 0}:${last.approval_id}`).toString('base64url');
}

/** The position a cursor names (records after it come next), or null when it is not one this API handed out. */
export function decodeApprovalCursor(cursor: string): ApprovalPosition | null {
  const m = /^(\d{1,15}):([0-9a-f-]{0,36}):(\d{1,4}):([\w.-]{1,100})$/.exec(Buffer.from(cursor, 'base64url').toString());
  return m ? { created_at: Number(m[1]), task_id: m[2]!, order: Number(m[3]), approval_id: m[4]! } : null;
}

/** The transcript of a parked worker, saved at the tool-call boundary (opaque JSON for the agent loop). */
export interface ParkedState {
  resume: unknown;
  approval_ids: string[];
}

/** An approval id names its task, so a decision finds the task's slot without an index: `<taskId>.<random>`. */
export function newApprovalId(taskId: string): string {
  return `${taskId}.${randomBytes(6).toString('hex')}`;
}

/** A VM run's approval id names its run: `r.<runId>.<random>`. */
export function newRunApprovalId(runId: string): string {
  return `r.${runId}.${randomBytes(6).toString('hex')}`;
}

export function runOfApproval(approvalId: string): string | null {
  const m = /^r\.([0-9a-f-]{36})\.[0-9a-f]{12}$/.exec(approvalId);
  return m ? m[1]! : null;
}

export function taskOfApproval(approvalId: string): string | null {
  const m = /^([0-9a-f-]{36})\.[0-9a-f]{12}$/.exec(approvalId);
  return m ? m[1]! : null;
}

/**
 * A session's approval id names its session (`s.<sessionId>.<random>`), so a decision from any surface finds
 * the session's slot; the `s.` keeps it apart from a task's.
 */
export function newSessionApprovalId(sessionId: string): string {
  return `s.${sessionId}.${randomBytes(6).toString('hex')}`;
}

export function sessionOfApproval(approvalId: string): string | null {
  const m = /^s\.([0-9a-f-]{36})\.[0-9a-f]{12}$/.exec(approvalId);
  return m ? m[1]! : null;
}

/** Whose approval it is: a team task's worker, a session's turn or a VM run (the id says which). */
export type ApprovalOwnerKind = 'task' | 'session' | 'run';
export const APPROVAL_OWNER_KINDS: readonly ApprovalOwnerKind[] = ['task', 'session', 'run'];

/** Hears of approvals decided (approved, denied, expired or cancelled), each once: metrics. */
export type ApprovalsDecided = (records: readonly ApprovalRecord[]) => void;

/** Hears of an inbox append that failed after the owner's script had recorded the transition: logs. */
export type InboxAppendFailed = (err: unknown, about: string) => void;

/** Approval records, parked workers and workspace policies; every write is one Lua script. */
export class ApprovalStore {
  readonly keys: KeyBuilder;
  private readonly redis: RedisClient;
  private readonly scripts: StoreScripts;
  private readonly maxEvents: number;
  private readonly retentionSec: number;
  private readonly onDecided: ApprovalsDecided | undefined;
  private readonly onInboxFailed: InboxAppendFailed | undefined;

  constructor(opts: { redis: RedisClient; keys?: KeyBuilder; maxEventsPerTask?: number; retentionSec?: number; onDecided?: ApprovalsDecided; onInboxFailed?: InboxAppendFailed }) {
    this.redis = opts.redis;
    this.keys = opts.keys ?? new KeyBuilder();
    this.scripts = scriptsOf(opts.redis);
    this.maxEvents = opts.maxEventsPerTask ?? 100_000;
    this.retentionSec = opts.retentionSec ?? DEFAULT_RETENTION_SEC;
    this.onDecided = opts.onDecided;
    this.onInboxFailed = opts.onInboxFailed;
  }

  async getPolicy(workspaceId: string): Promise<ApprovalPolicy> {
    const raw = await this.redis.get(this.keys.approvalPolicy(workspaceId));
    return raw ? (JSON.parse(raw) as ApprovalPolicy) : { rules: [] };
  }

  async setPolicy(workspaceId: string, policy: ApprovalPolicy): Promise<void> {
    await this.scripts.setApprovalPolicy(this.keys.approvalPolicy(workspaceId), JSON.stringify(policy));
  }

  /** Saves the parked worker's state and its pending approvals, fenced by the attempt's lease. */
  async park(taskId: string, workerId: string, lease: string, state: ParkedState, approvals: ApprovalRecord[]): Promise<void> {
    const t = this.keys.task(taskId);
    const a = this.keys.taskApprovals(taskId);
    const seq = await this.scripts.parkWorker(
      t.meta, t.events, t.roster, a.approvals, a.parked, taskId, workerId, lease, JSON.stringify(state), JSON.stringify(approvals),
      this.maxEvents, this.keys.taskAppended(taskId), this.retentionSec,
    );
    if (seq < 0) throw scriptError(seq, `park ${workerId}`);
    await this.announce(approvals[0]?.workspace_id ?? '', 'approval_requested', approvals);
  }

  async get(approvalId: string): Promise<ApprovalRecord | null> {
    const taskId = taskOfApproval(approvalId);
    if (!taskId) return null;
    const raw = await this.redis.hget(this.keys.taskApprovals(taskId).approvals, approvalId);
    return raw ? (JSON.parse(raw) as ApprovalRecord) : null;
  }

  async many(taskId: string, ids: readonly string[]): Promise<ApprovalRecord[]> {
    if (ids.length === 0) return [];
    const raws = await this.redis.hmget(this.keys.taskApprovals(taskId).approvals, ...ids);
    return raws.filter((r): r is string => r !== null).map((r) => JSON.parse(r) as ApprovalRecord);
  }

  async ofTask(taskId: string): Promise<ApprovalRecord[]> {
    const raws = await this.redis.hvals(this.keys.taskApprovals(taskId).approvals);
    return raws.map((r) => JSON.parse(r) as ApprovalRecord).sort((x, y) => x.created_at - y.created_at || x.approval_id.localeCompare(y.approval_id));
  }

  /**
   * Decides a pending approval once. Throws not_found / approval_decided (a second decision). Returns the record
   * and how many approvals of the same worker are still pending (0: the worker can resume). `modifier` (approved
   * only) is the amended arguments' JSON text; scope `task` grants the same tool and the arguments that ran (the
   * modifier's, if any) for the rest of the task.
   */
  async decide(
    approvalId: string, status: 'approved' | 'denied' | 'expired', reason: string, decidedBy: string,
    opts: { modifier?: string; scope?: ApprovalScope } = {},
  ): Promise<{ record: ApprovalRecord; pendingLeft: number }> {
    const taskId = taskOfApproval(approvalId);
    if (!taskId) throw new StoreError('approval_not_found', `no approval ${approvalId}`);
    const t = this.keys.task(taskId);
    const a = this.keys.taskApprovals(taskId);
    const scope = opts.scope ?? 'once';
    // The grant covers the arguments the approver let run: the amended ones when there is a modifier, else the
    // call as the model made it, read here (a call's tool and arguments never change once asked). As a session's.
    const asked = scope === 'task' && status === 'approved' ? await this.get(approvalId) : null;
    const grant = asked ? approvalGrant(asked.tool_name, opts.modifier || asked.arguments) : '';
    const [code, raw, left] = await this.scripts.decideApproval(
      t.meta, t.events, t.roster, a.approvals, a.grants, taskId, approvalId, status, reason, decidedBy, Date.now(),
      this.maxEvents, this.keys.taskAppended(taskId), opts.modifier ?? '', scope, grant, this.retentionSec,
    );
    if (code === SCRIPT_ERRORS.approval_decided.code) throw approvalDecided(approvalId, (JSON.parse(raw!) as ApprovalRecord).status);
    if (code < 0) throw scriptError(code, `approval ${approvalId}`);
    const record = JSON.parse(raw!) as ApprovalRecord;
    await this.announce(record.workspace_id, 'approval_decided', [record]);
    return { record, pendingLeft: left ?? 0 };
  }

  /**
   * After the task's cancel (which cancels its pending approvals in the same script): tells the inbox. Only a
   * cancel of the task cancels a task's approval, so every cancelled record of the task is this cancel's.
   */
  async announceCancelled(taskId: string): Promise<void> {
    const cancelled = (await this.ofTask(taskId)).filter((a) => a.status === 'cancelled');
    await this.announce(cancelled[0]?.workspace_id ?? '', 'approval_decided', cancelled);
  }

  /** Which of these calls an approval for the rest of the task already covers. */
  async granted(taskId: string, calls: readonly { tool: string; arguments: string }[]): Promise<boolean[]> {
    if (calls.length === 0) return [];
    const hits = await this.redis.smismember(this.keys.taskApprovals(taskId).grants, ...calls.map((c) => approvalGrant(c.tool, c.arguments)));
    return hits.map((h) => h === 1);
  }

  /**
   * Tells the workspace's inbox log (and its pending index) about transitions the owner's script just recorded
   * (requested, decided, cancelled). Separate from that script because the inbox lives in the workspace's slot.
   * A decision the index took out now is reported to `onDecided` (a repeated announcement is not).
   * Never throws: the transition stands (the record and the owner's log have it), and what follows it (waking the
   * worker, enqueueing the turn's continuation, the caller's answer) must happen all the same. A failed append
   * goes to `onInboxFailed`, and the inbox log misses that entry, as when the process dies between the two.
   */
  async announce(workspaceId: string, type: ApprovalInboxEvent['event_type'], records: readonly ApprovalRecord[]): Promise<void> {
    if (records.length === 0) return;
    const inbox = this.keys.approvalInbox(workspaceId);
    try {
      const [[, decided]] = await Promise.all([
        this.scripts.appendInbox(inbox.meta, inbox.events, this.keys.runsAppended(workspaceId), JSON.stringify(records.map((r) => [type, JSON.stringify(r)]))),
        // The scrape finds the pending index through the workspaces set (tasks and runs add theirs; a session's here).
        type === 'approval_requested' ? this.redis.sadd(this.keys.workspaces(), workspaceId) : undefined,
      ]);
      const counted = new Set(decided);
      if (this.onDecided && counted.size > 0) this.onDecided(records.filter((r) => counted.has(r.approval_id)));
    } catch (err) {
      this.inboxFailed(err, `workspace ${workspaceId}`);
    }
  }

  /**
   * Puts approvals in the workspace's pending index ahead of the owner's script that asks them (`add`), or takes
   * out those that script then refused (`remove`): a session's, whose script runs in another slot
   * (lua/indexPendingApprovals-1.lua). Never throws, as announce: a failure goes to `onInboxFailed`, and the
   * announcement after the owner's script indexes the approvals again.
   */
  async indexPending(workspaceId: string, op: 'add' | 'remove', records: readonly Pick<ApprovalRecord, 'approval_id' | 'expires_at'>[]): Promise<void> {
    if (records.length === 0) return;
    try {
      await this.scripts.indexPendingApprovals(this.keys.approvalInbox(workspaceId).meta, op, JSON.stringify(records.map((r) => [r.approval_id, r.expires_at])));
    } catch (err) {
      this.inboxFailed(err, `workspace ${workspaceId}`);
    }
  }

  /** Reports an announcement that could not be made (`about`: whose); the session store's reads for one too. */
  inboxFailed(err: unknown, about: string): void {
    this.onInboxFailed?.(err, about);
  }

  /**
   * Approvals waiting for a decision now, by owner kind, across the cluster: one ZCOUNT per workspace and kind of
   * the pending index (approval-inbox.lua), from now on (one past its deadline is not waiting any more).
   */
  async pendingCounts(): Promise<Record<ApprovalOwnerKind, number>> {
    const now = Date.now();
    const workspaces = await this.redis.smembers(this.keys.workspaces());
    const counts = await Promise.all(workspaces.flatMap((ws) => {
      const pending = this.keys.approvalsPending(ws);
      return APPROVAL_OWNER_KINDS.map(async (kind) => [kind, await this.redis.zcount(pending[kind], now, '+inf')] as const);
    }));
    const total: Record<ApprovalOwnerKind, number> = { task: 0, session: 0, run: 0 };
    for (const [kind, n] of counts) total[kind] += n;
    return total;
  }

  /**
   * The ids of the workspace's approvals of one owner kind waiting now, by the pending index (deadline from now on):
   * the inbox listing's way to a session's pending approvals, which no per-workspace list of sessions holds. The
   * index is a list of candidates, the owner's record the truth: a decision whose announcement was lost leaves its
   * id here until its deadline, so a caller reads each record before it shows one.
   */
  async pendingIds(workspaceId: string, kind: ApprovalOwnerKind): Promise<string[]> {
    return this.redis.zrangebyscore(this.keys.approvalsPending(workspaceId)[kind], Date.now(), '+inf');
  }

  async readInbox(workspaceId: string, afterSeq: number, limit: number): Promise<ApprovalInboxEvent[]> {
    const inbox = this.keys.approvalInbox(workspaceId);
    const [seq, entries] = await Promise.all([this.redis.hget(inbox.meta, 'seq'), this.redis.xrange(inbox.events, `(${afterSeq}-0`, '+', 'COUNT', limit) as Promise<StreamEntry[]>]);
    const events = entries.map(decodeInboxEntry);
    checkCursor(afterSeq, Number(seq ?? 0), events[0]?.seq, 'approvals inbox');
    return events;
  }

  /** The workspace's inbox log as the fan-out reads it; it never ends. */
  inboxLog(workspaceId: string): WatchableLog<ApprovalInboxEvent> {
    const inbox = this.keys.approvalInbox(workspaceId);
    return {
      id: `approvals:${workspaceId}`,
      channel: this.keys.runsAppended(workspaceId),
      decode: decodeInboxEntry,
      read: (afterSeq, limit) => this.readInbox(workspaceId, afterSeq, limit),
      head: async () => Number((await this.redis.hget(inbox.meta, 'seq')) ?? 0),
      isTerminal: () => false,
    };
  }
}

/** An approvals inbox entry (lua/includes/approval-inbox.lua): type, time and the approval record. */
function decodeInboxEntry(entry: StreamEntry): ApprovalInboxEvent {
  const { seq, timestamp, event_type, payload } = readEntry(entry);
  return { seq, timestamp, event_type: event_type as ApprovalInboxEvent['event_type'], payload: payload as ApprovalRecord };
}

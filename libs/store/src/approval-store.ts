import { randomBytes } from 'node:crypto';
import type { RedisClient } from './connect.ts';
import type { ApprovalStatus } from '@cadre/protocol';
import { KeyBuilder } from './keys.ts';
import { scriptError, StoreError } from './errors.ts';
import { scriptsOf, type StoreScripts } from './scripts.ts';

/** One rule of an approval policy; the first rule whose `tool` glob matches a call decides it. */
export interface ApprovalRule {
  /** Glob over the tool's name: `*` matches any run of characters, `?` one character. */
  tool: string;
  action: 'allow' | 'ask' | 'deny';
  /** How long an `ask` waits before it is denied with "approval timed out". */
  timeout_secs?: number;
  /** Shown to the operator (ask) or to the model (deny). */
  reason?: string;
}

export interface ApprovalPolicy {
  rules: ApprovalRule[];
}

export const DEFAULT_APPROVAL_TIMEOUT_SECS = 600;

/** What a policy says about one call. No matching rule: allow (the documented default). */
export type PolicyVerdict = { action: 'allow' } | { action: 'deny'; reason: string } | { action: 'ask'; reason: string; timeout_secs: number };

export function evaluatePolicy(rules: readonly ApprovalRule[], tool: string): PolicyVerdict {
  const rule = rules.find((r) => globMatches(r.tool, tool));
  if (!rule || rule.action === 'allow') return { action: 'allow' };
  if (rule.action === 'deny') return { action: 'deny', reason: rule.reason ?? `the policy denies ${tool}` };
  return { action: 'ask', reason: rule.reason ?? `the policy asks before ${tool}`, timeout_secs: rule.timeout_secs ?? DEFAULT_APPROVAL_TIMEOUT_SECS };
}

export function globMatches(glob: string, name: string): boolean {
  const pattern = glob.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.');
  return new RegExp(`^${pattern}$`).test(name);
}

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

/** Approval records, parked workers and workspace policies; every write is one Lua script. */
export class ApprovalStore {
  readonly keys: KeyBuilder;
  private readonly redis: RedisClient;
  private readonly scripts: StoreScripts;
  private readonly maxEvents: number;
  private readonly retentionSec: number;

  constructor(opts: { redis: RedisClient; keys?: KeyBuilder; maxEventsPerTask?: number; retentionSec?: number }) {
    this.redis = opts.redis;
    this.keys = opts.keys ?? new KeyBuilder();
    this.scripts = scriptsOf(opts.redis);
    this.maxEvents = opts.maxEventsPerTask ?? 100_000;
    this.retentionSec = opts.retentionSec ?? 7 * 24 * 3600;
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
  }

  async parked(taskId: string, workerId: string): Promise<ParkedState | null> {
    const raw = await this.redis.hget(this.keys.taskApprovals(taskId).parked, workerId);
    return raw ? (JSON.parse(raw) as ParkedState) : null;
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
   * and how many approvals of the same worker are still pending (0: the worker can resume).
   */
  async decide(approvalId: string, status: 'approved' | 'denied' | 'expired', reason: string, decidedBy: string): Promise<{ record: ApprovalRecord; pendingLeft: number }> {
    const taskId = taskOfApproval(approvalId);
    if (!taskId) throw new StoreError('approval_not_found', `no approval ${approvalId}`);
    const t = this.keys.task(taskId);
    const [code, raw, left] = await this.scripts.decideApproval(
      t.meta, t.events, t.roster, this.keys.taskApprovals(taskId).approvals, taskId, approvalId, status, reason, decidedBy, Date.now(),
      this.maxEvents, this.keys.taskAppended(taskId),
    );
    if (code === -1) throw new StoreError('approval_not_found', `no approval ${approvalId}`);
    if (code === -2) throw new StoreError('approval_decided', `approval ${approvalId} is already ${(JSON.parse(raw!) as ApprovalRecord).status}`);
    return { record: JSON.parse(raw!) as ApprovalRecord, pendingLeft: left ?? 0 };
  }
}

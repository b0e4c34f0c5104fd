import { argumentsProblem, builtinTools } from '@cadre/agent';
import { APPROVAL_STATUSES, type ApprovalScope, type ApprovalStatus } from '@cadre/protocol';
import { SessionEngineError, type SessionApprovalView, type SessionEngine } from '@cadre/session';
import {
  StoreError, runOfApproval, sessionOfApproval, compareApprovals, decodeApprovalCursor, encodeApprovalCursor,
  type ApprovalInboxEvent, type ApprovalPolicy, type ApprovalRecord, type ApprovalStore, type EventFanout, type LogWatcher, type RunStore, type TaskStore, type TeamQueue,
} from '@cadre/store';
import { canAccess, type Principal } from '../auth.ts';
import { ApiError } from '../errors.ts';
import { checkPolicy } from '../tasks/task-service.ts';
import type { RunApprovals } from '../runs/run-approvals.ts';

export interface ApprovalServiceDeps {
  approvals: ApprovalStore;
  store: TaskStore;
  queue: TeamQueue;
  fanout: EventFanout;
  /** A session's approvals (ids `s.<sessionId>.…`) live with the session and are decided through its engine. */
  sessions: SessionEngine;
  /** A VM run's approvals (ids `r.<runId>.…`) live with the run, in its workspace's slot. */
  runs: RunStore;
  runApprovals: RunApprovals;
}

/** What the API shows: a team worker's record or a session's approval (the same fields, plus session_id). */
export type ApprovalView = ApprovalRecord | SessionApprovalView;

/** The inbox's filters (GET /api/approvals and the bulk decision's `filter`). */
export interface ApprovalFilter {
  workspace_id: string;
  status?: ApprovalStatus;
  task_id?: string;
  session_id?: string;
  run_id?: string;
  /** Glob-free exact tool name (bulk filter only). */
  tool?: string;
}

export interface Decision {
  approved: boolean;
  reason?: string;
  /** The amended arguments the call runs with (approve only), checked against the tool's JSON schema. */
  modifier?: Record<string, unknown>;
  scope?: ApprovalScope;
}

/** One item of a bulk decision: what happened to it, and the record as it is now (when the key may see it). */
export interface BulkOutcome {
  approval_id: string;
  outcome: 'decided' | 'conflict' | 'not_found';
  approval?: ApprovalView;
  error?: string;
}

/** At most this many approvals are decided by one bulk request (by ids or matched by a filter). */
export const BULK_MAX = 200;

/**
 * The name a decision is recorded under. Keys have no names of their own in Cadre's config, so the name says
 * which kind of key decided (and for a workspace key, its workspace); the key itself is never stored.
 */
export function keyName(principal: Principal): string {
  return principal.workspaces === 'all' ? 'operator-key' : `workspace-key:${principal.workspaces}`;
}

/** Policies, the approval inbox, decisions (one or in bulk) and the inbox's live stream, behind the HTTP routes. */
export class ApprovalService {
  private readonly deps: ApprovalServiceDeps;

  constructor(deps: ApprovalServiceDeps) {
    this.deps = deps;
  }

  private checkWorkspace(principal: Principal, workspaceId: string): void {
    if (!canAccess(principal, workspaceId)) throw new ApiError('permission_denied', `this key is not valid for workspace "${workspaceId}"`);
  }

  async getPolicy(principal: Principal, workspaceId: string): Promise<ApprovalPolicy> {
    this.checkWorkspace(principal, workspaceId);
    return this.deps.approvals.getPolicy(workspaceId);
  }

  async setPolicy(principal: Principal, workspaceId: string, policy: ApprovalPolicy): Promise<ApprovalPolicy> {
    this.checkWorkspace(principal, workspaceId);
    checkPolicy(policy, 'body');
    await this.deps.approvals.setPolicy(workspaceId, policy);
    return policy;
  }

  /** One approval; another workspace's reads as not found (its existence is not revealed). */
  async get(principal: Principal, approvalId: string): Promise<ApprovalView> {
    const sessionId = sessionOfApproval(approvalId);
    if (sessionId) {
      const found = (await this.deps.sessions.approvals(principal, sessionId).catch(noSession)).find((a) => a.approval_id === approvalId);
      if (!found) throw new ApiError('not_found', `approval ${approvalId} not found`);
      return found;
    }
    const runId = runOfApproval(approvalId);
    const found = runId ? (await this.deps.runs.approvals(runId)).find((a) => a.approval_id === approvalId) : await this.deps.approvals.get(approvalId);
    if (!found || !canAccess(principal, found.workspace_id)) throw new ApiError('not_found', `approval ${approvalId} not found`);
    return runId ? this.deps.runApprovals.expireIfDue(found) : found;
  }

  /**
   * The inbox, oldest first (then by id), a page at a time: approvals of the workspace's unfinished tasks (a
   * finished task has no pending approval left), active runs and sessions' pending ones, or of one task, run or
   * session. `cursor` is the opaque `next_cursor` of the page
   * before; the order is stable, so a record asked after a page was read comes on a later page.
   */
  async list(principal: Principal, q: ApprovalFilter & { cursor?: string; limit?: number }): Promise<{ approvals: ApprovalView[]; next_cursor: string | null }> {
    this.checkWorkspace(principal, q.workspace_id);
    const after = q.cursor === undefined ? null : decodeApprovalCursor(q.cursor);
    if (q.cursor !== undefined && !after) throw new ApiError('invalid_argument', 'cursor is not one this API handed out');
    const limit = q.limit ?? 50;
    const matching = (await this.matching(principal, q)).filter((a) => !after || compareApprovals(a, after) > 0);
    const page = matching.slice(0, limit);
    return { approvals: page, next_cursor: matching.length > limit ? encodeApprovalCursor(page.at(-1)!) : null };
  }

  /** Every record the filter matches, in the inbox's order. */
  private async matching(principal: Principal, q: ApprovalFilter): Promise<ApprovalView[]> {
    if (q.status !== undefined && !APPROVAL_STATUSES.includes(q.status)) throw new ApiError('invalid_argument', `unknown status ${q.status}`);
    let all: ApprovalView[];
    if (q.session_id !== undefined) {
      // A session's approvals, its earlier turns' included.
      all = await this.deps.sessions.approvals(principal, q.session_id).catch(noSession);
    } else if (q.run_id !== undefined) {
      all = await this.runApprovalsOf([q.run_id]);
    } else if (q.task_id !== undefined) {
      all = await this.deps.approvals.ofTask(q.task_id);
    } else {
      // The workspace's unfinished tasks and active runs (a finished one has no pending approval left), and its
      // sessions' approvals that wait now.
      const [taskIds, runIds, sessionAsks] = await Promise.all([
        this.deps.store.activeTaskIds(q.workspace_id), this.deps.runs.activeRunIds(q.workspace_id), this.pendingOfSessions(principal, q.workspace_id),
      ]);
      all = [...(await Promise.all(taskIds.map((id) => this.deps.approvals.ofTask(id)))).flat(), ...(await this.runApprovalsOf(runIds)), ...sessionAsks];
    }
    return all
      .filter((a) => a.workspace_id === q.workspace_id && (q.status === undefined || a.status === q.status) && (q.tool === undefined || a.tool_name === q.tool))
      .sort(compareApprovals);
  }

  /**
   * The workspace's sessions' approvals that are pending now. No list of a workspace's sessions exists (a session
   * lives in its own slot), so the workspace's pending index (kept beside its inbox log) names them, and each
   * session's own record decides: an id whose decision the index missed is left out, as is one past its deadline.
   * Only pending ones: a session's decided approvals are listed with session_id=.
   */
  private async pendingOfSessions(principal: Principal, workspaceId: string): Promise<SessionApprovalView[]> {
    const ids = new Set(await this.deps.approvals.pendingIds(workspaceId, 'session'));
    const sessionIds = new Set([...ids].map(sessionOfApproval).filter((id): id is string => id !== null));
    const records = await Promise.all([...sessionIds].map((id) => this.deps.sessions.approvals(principal, id).catch(noSession)));
    return records.flat().filter((a) => ids.has(a.approval_id) && a.status === 'pending');
  }

  /** Runs' approvals as they stand (a pending one past its deadline is expired as it is read). */
  private async runApprovalsOf(runIds: readonly string[]): Promise<ApprovalRecord[]> {
    const records = (await Promise.all(runIds.map((id) => this.deps.runs.approvals(id)))).flat();
    return Promise.all(records.map((r) => this.deps.runApprovals.expireIfDue(r)));
  }

  /**
   * Records the one decision; a second is 409. Input is checked before anything is written: a modifier only with
   * an approval, as an object the tool's JSON schema accepts. The parked worker is woken once its last approval
   * is decided.
   */
  async decide(principal: Principal, approvalId: string, decision: Decision): Promise<ApprovalView> {
    const record = await this.get(principal, approvalId);
    this.checkDecision(record, decision);
    const { approved, modifier, scope } = decision;
    const reason = decision.reason ?? (approved ? '' : 'denied by an operator');
    const sessionId = sessionOfApproval(approvalId);
    if (sessionId) {
      return this.deps.sessions.decideApproval(principal, sessionId, approvalId, approved, reason, keyName(principal), scope === 'session' ? 'session' : 'once', modifier);
    }
    const runId = runOfApproval(approvalId);
    if (runId) {
      // The vm-agent polls the approval and goes on once it is decided (with the modifier): nothing to wake here.
      return this.storeDecision(approvalId, () => this.deps.runs.decideApproval(
        approvalId, approved ? 'approved' : 'denied', reason, keyName(principal), modifier && JSON.stringify(modifier),
      ));
    }
    const decided = await this.storeDecision(approvalId, () => this.deps.approvals.decide(approvalId, approved ? 'approved' : 'denied', reason, keyName(principal), {
      ...(modifier && { modifier: JSON.stringify(modifier) }),
      ...(scope && { scope }),
    }));
    if (decided.pendingLeft === 0) await this.wake(decided.record);
    return decided.record;
  }

  /** A store's decision, its errors in the API's terms (a second decision is 409). */
  private async storeDecision<T>(approvalId: string, write: () => Promise<T>): Promise<T> {
    try {
      return await write();
    } catch (err) {
      if (err instanceof StoreError && err.code === 'approval_decided') throw new ApiError('conflict', err.message);
      if (err instanceof StoreError && err.code === 'approval_not_found') throw new ApiError('not_found', `approval ${approvalId} not found`);
      throw err;
    }
  }

  /**
   * Decides several approvals the same way: those named by `ids`, or the pending ones a filter matches (at most
   * BULK_MAX, oldest first). Each gets its own outcome; one that was decided meanwhile is a `conflict`, not a
   * failure of the rest. A modifier has no place here (it is per tool).
   */
  async decideMany(principal: Principal, req: { ids?: string[]; filter?: Omit<ApprovalFilter, 'status'>; decision: Decision }): Promise<BulkOutcome[]> {
    if ((req.ids === undefined) === (req.filter === undefined)) throw new ApiError('invalid_argument', 'give either ids or filter');
    if (req.decision.modifier !== undefined) throw new ApiError('invalid_argument', 'a modifier amends one call\'s arguments; decide that approval on its own');
    let ids: string[];
    if (req.filter) {
      this.checkWorkspace(principal, req.filter.workspace_id);
      ids = (await this.matching(principal, { ...req.filter, status: 'pending' })).slice(0, BULK_MAX).map((a) => a.approval_id);
    } else {
      ids = [...new Set(req.ids)];
    }
    const outcomes: BulkOutcome[] = [];
    // One at a time, in the order given: the log of each task reads in the order the operator decided.
    for (const id of ids) outcomes.push(await this.decideOne(principal, id, req.decision));
    return outcomes;
  }

  private async decideOne(principal: Principal, approvalId: string, decision: Decision): Promise<BulkOutcome> {
    try {
      return { approval_id: approvalId, outcome: 'decided', approval: await this.decide(principal, approvalId, decision) };
    } catch (err) {
      if (!(err instanceof ApiError || err instanceof SessionEngineError) || (err.code !== 'conflict' && err.code !== 'not_found')) throw err;
      if (err.code === 'not_found') return { approval_id: approvalId, outcome: 'not_found', error: err.message };
      return { approval_id: approvalId, outcome: 'conflict', error: err.message, approval: await this.get(principal, approvalId) };
    }
  }

  /**
   * The workspace's inbox as it changes: every approval_requested and approval_decided after `afterSeq` (the
   * inbox log's seq, what SSE sends as `id:`), then live. It never ends by itself.
   */
  async watch(principal: Principal, workspaceId: string, afterSeq: number): Promise<LogWatcher<ApprovalInboxEvent>> {
    this.checkWorkspace(principal, workspaceId);
    // A cursor that is too old or ahead is refused now (410), not as an error event after a 200.
    await this.deps.approvals.readInbox(workspaceId, afterSeq, 1).catch((err: unknown) => {
      if (err instanceof StoreError && (err.code === 'cursor_expired' || err.code === 'cursor_ahead')) throw new ApiError('out_of_range', err.message);
      throw err;
    });
    return this.deps.fanout.watch(this.deps.approvals.inboxLog(workspaceId), afterSeq);
  }

  private checkDecision(record: ApprovalView, decision: Decision): void {
    const ofRun = 'run_id' in record && record.run_id !== undefined;
    if (ofRun && (decision.scope ?? 'once') !== 'once') throw new ApiError('invalid_argument', 'a VM run\'s approval takes scope "once" only');
    const ofSession = 'session_id' in record;
    if (ofSession && decision.scope === 'task') throw new ApiError('invalid_argument', 'scope "task" applies to a team worker\'s approvals; this one is a session\'s (use "session")');
    if (!ofSession && decision.scope === 'session') throw new ApiError('invalid_argument', 'scope "session" applies to a session\'s approvals; this one is a team worker\'s (use "task")');
    if (decision.modifier === undefined) return;
    if (!decision.approved) throw new ApiError('invalid_argument', 'a modifier amends the arguments of an approved call; a denial takes none');
    // A session's tools (its client tools' schemas included) are the session's: its engine checks the modifier.
    if (ofSession) return;
    // A VM run's tools live on the VM: the vm-agent sent the schema with the call (an older one did not).
    const schema = ofRun
      ? (record.parameters_schema === undefined ? undefined : JSON.parse(record.parameters_schema) as Record<string, unknown>)
      : (Object.hasOwn(builtinTools, record.tool_name) ? builtinTools[record.tool_name]!.parameters : undefined);
    if (!schema) throw new ApiError('invalid_argument', `no argument schema is known for ${record.tool_name}${ofRun ? ' (the vm-agent sent none)' : ''}, so its arguments cannot be amended`);
    const problem = argumentsProblem(record.tool_name, schema, decision.modifier);
    if (problem) throw new ApiError('invalid_argument', `modifier ${problem}`);
  }

  /**
   * Promotes the worker's delayed job. If the worker has not moved it to delayed yet, promote fails, and the
   * worker's own re-read after its move sees the decision and promotes it.
   */
  private async wake(record: ApprovalRecord): Promise<void> {
    await this.deps.queue.wakeWorker(record.task_id, record.worker_id);
  }
}

/**
 * A session the engine refuses to show (gone, another workspace's, not a session id) has no approvals to show; any
 * other failure (Redis failing over) is not an empty answer, and goes out as it is (503).
 */
function noSession(err: unknown): SessionApprovalView[] {
  if (err instanceof SessionEngineError) return [];
  throw err;
}

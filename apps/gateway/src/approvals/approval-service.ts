import { APPROVAL_STATUSES, type ApprovalStatus } from '@cadre/protocol';
import type { SessionApprovalView, SessionEngine } from '@cadre/session';
import { StoreError, sessionOfApproval, type ApprovalPolicy, type ApprovalRecord, type ApprovalStore, type TaskStore, type TeamQueue } from '@cadre/store';
import { canAccess, type Principal } from '../auth.ts';
import { ApiError } from '../errors.ts';

export interface ApprovalServiceDeps {
  approvals: ApprovalStore;
  store: TaskStore;
  queue: TeamQueue;
  /** A session's approvals (ids `s.<sessionId>.…`) live with the session and are decided through its engine. */
  sessions: SessionEngine;
}

/**
 * The name a decision is recorded under. Keys have no names of their own in Cadre's config, so the name says
 * which kind of key decided (and for a workspace key, its workspace); the key itself is never stored.
 */
export function keyName(principal: Principal): string {
  return principal.workspaces === 'all' ? 'operator-key' : `workspace-key:${principal.workspaces}`;
}

/** Policies, the approval inbox and decisions, behind the HTTP routes. */
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
    await this.deps.approvals.setPolicy(workspaceId, policy);
    return policy;
  }

  /** One approval; another workspace's reads as not found (its existence is not revealed). */
  async get(principal: Principal, approvalId: string): Promise<ApprovalRecord | SessionApprovalView> {
    const sessionId = sessionOfApproval(approvalId);
    if (sessionId) {
      const found = (await this.deps.sessions.approvals(principal, sessionId).catch(() => [])).find((a) => a.approval_id === approvalId);
      if (!found) throw new ApiError('not_found', `approval ${approvalId} not found`);
      return found;
    }
    const record = await this.deps.approvals.get(approvalId);
    if (!record || !canAccess(principal, record.workspace_id)) throw new ApiError('not_found', `approval ${approvalId} not found`);
    return record;
  }

  /**
   * The inbox: a task's approvals, or those of the workspace's unfinished tasks (a finished task has no pending
   * approval left), oldest first.
   */
  async list(principal: Principal, q: { workspace_id: string; status?: ApprovalStatus; task_id?: string; session_id?: string }): Promise<(ApprovalRecord | SessionApprovalView)[]> {
    this.checkWorkspace(principal, q.workspace_id);
    if (q.status !== undefined && !APPROVAL_STATUSES.includes(q.status)) throw new ApiError('invalid_argument', `unknown status ${q.status}`);
    if (q.session_id) {
      // A session's approvals of its current turn (earlier turns' are in its log).
      const ofSession = await this.deps.sessions.approvals(principal, q.session_id).catch(() => []);
      return ofSession.filter((a) => a.workspace_id === q.workspace_id && (q.status === undefined || a.status === q.status));
    }
    const taskIds = q.task_id ? [q.task_id] : await this.deps.store.activeTaskIds(q.workspace_id);
    const all = (await Promise.all(taskIds.map((id) => this.deps.approvals.ofTask(id)))).flat();
    return all
      .filter((a) => a.workspace_id === q.workspace_id && (q.status === undefined || a.status === q.status))
      .sort((x, y) => x.created_at - y.created_at || x.approval_id.localeCompare(y.approval_id));
  }

  /** Records the one decision; a second is 409. The parked worker is woken once its last approval is decided. */
  async decide(principal: Principal, approvalId: string, approved: boolean, reason: string | undefined): Promise<ApprovalRecord | SessionApprovalView> {
    const sessionId = sessionOfApproval(approvalId);
    if (sessionId) return this.deps.sessions.decideApproval(principal, sessionId, approvalId, approved, reason ?? (approved ? '' : 'denied by an operator'), keyName(principal));
    await this.get(principal, approvalId);
    let decided;
    try {
      decided = await this.deps.approvals.decide(approvalId, approved ? 'approved' : 'denied', reason ?? (approved ? '' : 'denied by an operator'), keyName(principal));
    } catch (err) {
      if (err instanceof StoreError && err.code === 'approval_decided') throw new ApiError('conflict', err.message);
      if (err instanceof StoreError && err.code === 'approval_not_found') throw new ApiError('not_found', `approval ${approvalId} not found`);
      throw err;
    }
    if (decided.pendingLeft === 0) await this.wake(decided.record);
    return decided.record;
  }

  /**
   * Promotes the worker's delayed job. If the worker has not moved it to delayed yet, promote fails, and the
   * worker's own re-read after its move sees the decision and promotes it.
   */
  private async wake(record: ApprovalRecord): Promise<void> {
    await this.deps.queue.wakeWorker(record.task_id, record.worker_id);
  }
}

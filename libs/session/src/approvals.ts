import type { ApprovalStatus } from '@cadre/protocol';
import { policyProblem, type ApprovalRule, type ClientCall } from '@cadre/store';
import { invalid } from './errors.ts';
import type { SessionQueue } from './session-queue.ts';

const ACTIONS = ['allow', 'ask', 'deny'];
const MAX_RULES = 64;
const MAX_TIMEOUT_SECS = 7 * 24 * 3600;

/** Checks a session's own approval rules (given at creation); throws invalid_argument naming the first bad one. */
export function approvalRules(rules: readonly ApprovalRule[], what: string): ApprovalRule[] {
  if (!Array.isArray(rules)) throw invalid(`${what} must be a list of rules`);
  if (rules.length > MAX_RULES) throw invalid(`${what}: at most ${MAX_RULES} rules`);
  return rules.map((rule, i) => {
    const where = `${what}[${i}]`;
    if (typeof rule.tool !== 'string' || rule.tool.length === 0 || rule.tool.length > 128) throw invalid(`${where}.tool must be a tool name glob of 1..128 characters`);
    if (!ACTIONS.includes(rule.action)) throw invalid(`${where}.action must be one of ${ACTIONS.join(', ')}`);
    if (rule.timeout_secs !== undefined && (!Number.isInteger(rule.timeout_secs) || rule.timeout_secs < 1 || rule.timeout_secs > MAX_TIMEOUT_SECS)) {
      throw invalid(`${where}.timeout_secs must be an integer 1..${MAX_TIMEOUT_SECS}`);
    }
    if (rule.reason !== undefined && (typeof rule.reason !== 'string' || rule.reason.length > 1000)) throw invalid(`${where}.reason must be at most 1000 characters`);
    const problem = policyProblem([rule], what);
    if (problem) throw invalid(problem.replace(`${what}[0]`, where));
    return { tool: rule.tool, ...(rule.when !== undefined && { when: rule.when }), action: rule.action, ...(rule.timeout_secs !== undefined && { timeout_secs: rule.timeout_secs }), ...(rule.reason !== undefined && { reason: rule.reason }) };
  });
}

/** A session approval as the approvals API shows it (the same fields as a team worker's record). */
export interface SessionApprovalView {
  approval_id: string;
  workspace_id: string;
  session_id: string;
  task_id: string;
  worker_id: string;
  call_id: string;
  /** The call's place among its turn's calls (the model's order), from 0. */
  order: number;
  tool_name: string;
  arguments: string;
  reason: string;
  timeout_secs: number;
  status: ApprovalStatus;
  created_at: number;
  expires_at: number;
  decided_at?: number;
  decided_by?: string;
  decision_reason?: string;
  scope?: 'once' | 'session';
  /** The amended arguments (a JSON object's text) the call ran with instead of the model's. */
  modifier?: string;
}

export function approvalView(workspaceId: string, sessionId: string, call: ClientCall): SessionApprovalView {
  const a = call.approval!;
  return {
    approval_id: a.approval_id, workspace_id: workspaceId, session_id: sessionId, task_id: '', worker_id: '', call_id: call.tool_call_id, order: call.order,
    tool_name: call.tool_name, arguments: call.arguments, reason: a.reason, timeout_secs: a.timeout_secs, status: a.status,
    created_at: a.created_at, expires_at: a.expires_at,
    ...(a.decided_at !== undefined && { decided_at: a.decided_at }),
    ...(a.decided_by !== undefined && { decided_by: a.decided_by }),
    ...(a.decision_reason !== undefined && { decision_reason: a.decision_reason }),
    ...(a.scope !== undefined && { scope: a.scope }),
    ...(a.modifier !== undefined && { modifier: a.modifier }),
  };
}

/**
 * What follows a decision outside the script: an approved client call's own deadline starts, and a turn whose
 * last awaited call this was is resumed by a continuation job.
 */
export async function afterDecision(queue: SessionQueue, sessionId: string, decided: { call: ClientCall; wake: number }): Promise<void> {
  const { call, wake } = decided;
  if (call.approval?.status === 'approved' && !call.builtin && call.status === 'pending') {
    await queue.scheduleDeadline(sessionId, call.tool_call_id, call.deadline_ms - Date.now(), call.timeout_ms);
  }
  if (wake > 0) await queue.enqueueTurn(sessionId, wake);
}

/**
 * Tells the workspace's approvals inbox (GET /api/approvals/stream) about transitions the session's own script
 * just recorded. Wired by the apps to ApprovalStore.announce; without it sessions' approvals stay in their own log.
 */
export type AnnounceApprovals = (workspaceId: string, type: 'approval_requested' | 'approval_decided', approvals: SessionApprovalView[]) => Promise<void>;

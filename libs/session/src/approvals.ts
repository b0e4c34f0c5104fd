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
    checkWhen(rule.when, `${where}.when`);
    const problem = policyProblem([rule], what);
    if (problem) throw invalid(problem.replace(`${what}[0]`, where));
    return { tool: rule.tool, ...(rule.when !== undefined && { when: rule.when }), action: rule.action, ...(rule.timeout_secs !== undefined && { timeout_secs: rule.timeout_secs }), ...(rule.reason !== undefined && { reason: rule.reason }) };
  });
}

/** The HTTP schema's bounds on a rule's argument conditions, for edges without one (gRPC StartSession). */
function checkWhen(when: ApprovalRule['when'], where: string): void {
  if (when === undefined) return;
  if (typeof when !== 'object' || when === null || Array.isArray(when)) throw invalid(`${where} must be an object`);
  const entries = Object.entries(when);
  if (entries.length > 16) throw invalid(`${where}: at most 16 conditions`);
  for (const [name, match] of entries) {
    if (name.length > 128) throw invalid(`${where}: an argument name is longer than 128 characters`);
    const text = match && ('glob' in match ? { kind: 'glob', value: match.glob, max: 1000 } : 'regex' in match ? { kind: 'regex', value: match.regex, max: 500 } : null);
    if (text && (typeof text.value !== 'string' || text.value.length > text.max)) throw invalid(`${where}.${name}.${text.kind} must be a string of at most ${text.max} characters`);
  }
}

/**
 * What follows a decision outside the script: an approved client call's own deadline starts. Callers run it inside
 * the changeAndEnqueue around the decision (which also resumes a turn whose last awaited call this was), so a process
 * that dies before it leaves the mark, and the sweeper arms the deadline.
 */
export async function afterDecision(queue: SessionQueue, sessionId: string, decided: { call: ClientCall }): Promise<void> {
  const { call } = decided;
  if (call.approval?.status === 'approved' && !call.builtin && call.status === 'pending') {
    await queue.scheduleDeadline(sessionId, call.tool_call_id, call.deadline_ms - Date.now(), call.timeout_ms);
  }
}

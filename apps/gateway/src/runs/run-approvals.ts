import { schemaProblem } from '@cadre/agent';
import { SESSION_LIMITS } from '@cadre/session';
import { evaluatePolicy, newRunApprovalId, StoreError, type ApprovalRecord, type ApprovalStore, type RunStore } from '@cadre/store';
import type { Principal } from '../auth.ts';
import { ApiError } from '../errors.ts';
import type { CallVerdict, ProposedCall } from '@cadre/protocol';

/**
 * Approvals of VM runs. The vm-agent runs the agent loop on the VM, so it is the one that waits: it asks here
 * before a turn's tools run, and for each `ask` polls the approval (GET) until it is decided, holding nothing on
 * the gateway. The deadline needs no timer: the first read after it records `expired` (once, in Lua).
 * VM runs follow their workspace's rules only: the host-tool defaults (shell, write_file ask) do not apply,
 * because those tools act on the VM, which is the run's own sandbox.
 */
export class RunApprovals {
  private readonly deps: { runs: RunStore; approvals: ApprovalStore };

  constructor(deps: { runs: RunStore; approvals: ApprovalStore }) {
    this.deps = deps;
  }

  /** The holder's proposed calls (the model's order) → verdicts; asks become pending approvals in the run's log. */
  async propose(principal: Principal, runId: string, holder: { worker_id: string; lease_id: string }, calls: readonly ProposedCall[]): Promise<CallVerdict[]> {
    const ws = await this.workspaceOf(principal, runId);
    const schemas = calls.map((call, i) => {
      if (call.parameters_schema === undefined) return undefined;
      const text = JSON.stringify(call.parameters_schema);
      const problem = text.length > SESSION_LIMITS.toolSchemaBytes ? `is larger than ${SESSION_LIMITS.toolSchemaBytes} bytes` : schemaProblem(call.parameters_schema);
      if (problem) throw new ApiError('invalid_argument', `calls[${i}].parameters_schema ${problem}`);
      return text;
    });
    const rules = (await this.deps.approvals.getPolicy(ws)).rules;
    const now = Date.now();
    const records: ApprovalRecord[] = [];
    const verdicts = calls.map((call, order): CallVerdict => {
      const v = evaluatePolicy(Array.isArray(rules) ? rules : [], call.tool_name, call.arguments, { defaults: false });
      if (v.action !== 'ask') return { call_id: call.call_id, ...v };
      const record: ApprovalRecord = {
        approval_id: newRunApprovalId(runId), workspace_id: ws, task_id: '', run_id: runId, worker_id: holder.worker_id, call_id: call.call_id,
        tool_name: call.tool_name, arguments: call.arguments, reason: v.reason, timeout_secs: v.timeout_secs, status: 'pending',
        created_at: now, expires_at: now + v.timeout_secs * 1000, order, ...(schemas[order] !== undefined && { parameters_schema: schemas[order] }),
      };
      records.push(record);
      return { call_id: call.call_id, action: 'ask', approval_id: record.approval_id, reason: v.reason, timeout_secs: v.timeout_secs, expires_at: record.expires_at };
    });
    if (records.length > 0) {
      try {
        await this.deps.runs.askApprovals(runId, holder.worker_id, holder.lease_id, records);
      } catch (err) {
        if (err instanceof StoreError && err.code === 'worker_mismatch') throw new ApiError('not_found', 'Run not found or worker mismatch');
        if (err instanceof StoreError && err.code === 'run_finished') throw new ApiError('conflict', `run ${runId} has ended`);
        throw err;
      }
    }
    return verdicts;
  }

  /** One of the run's approvals as it stands; a pending one past its deadline is expired first. */
  async poll(principal: Principal, runId: string, approvalId: string): Promise<ApprovalRecord> {
    await this.workspaceOf(principal, runId);
    const record = (await this.deps.runs.approvals(runId)).find((a) => a.approval_id === approvalId);
    if (!record) throw new ApiError('not_found', `approval ${approvalId} not found`);
    return this.expireIfDue(record);
  }

  /** Records `expired` for a pending approval past its deadline (someone else may have decided it meanwhile). */
  async expireIfDue(record: ApprovalRecord): Promise<ApprovalRecord> {
    if (record.status !== 'pending' || record.expires_at > Date.now()) return record;
    try {
      return await this.deps.runs.decideApproval(record.approval_id, 'expired', 'approval timed out', '');
    } catch (err) {
      if (!(err instanceof StoreError && err.code === 'approval_decided')) throw err;
      return (await this.deps.runs.approvals(record.run_id!)).find((a) => a.approval_id === record.approval_id) ?? record;
    }
  }

  private async workspaceOf(principal: Principal, runId: string): Promise<string> {
    const ws = await this.deps.runs.workspaceOf(runId);
    if (!ws || (principal.workspaces !== 'all' && principal.workspaces !== ws)) throw new ApiError('not_found', 'Run not found');
    return ws;
  }
}

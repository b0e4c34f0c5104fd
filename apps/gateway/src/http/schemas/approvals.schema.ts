// JSON schemas of the approvals API. Bodies are strict; querystrings are coerced from text.
import { APPROVAL_SCOPES, APPROVAL_STATUSES } from '@cadre/protocol';
import { BULK_MAX } from '../../approvals/approval-service.ts';
import { approvalPolicySchema } from './tasks.schema.ts';
import { closedObject } from './closed-object.ts';

const workspaceId = { type: 'string', minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$' } as const;

export const policyParams = { type: 'object', required: ['workspace_id'], properties: { workspace_id: workspaceId } } as const;
export const policyBody = approvalPolicySchema;

export const approvalParams = {
  type: 'object',
  required: ['approval_id'],
  properties: { approval_id: { type: 'string', minLength: 1, maxLength: 100 } },
} as const;

const uuid = { type: 'string', pattern: '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' } as const;
const runId = { type: 'string', minLength: 1, maxLength: 128 } as const;

export const listApprovalsQuery = {
  type: 'object',
  additionalProperties: false,
  required: ['workspace_id'],
  properties: {
    workspace_id: workspaceId,
    status: { type: 'string', enum: [...APPROVAL_STATUSES] },
    task_id: uuid,
    session_id: uuid,
    run_id: runId,
    cursor: { type: 'string', minLength: 1, maxLength: 200 },
    limit: { type: 'integer', minimum: 1, maximum: 200 },
  },
} as const;

const decisionFields = {
  approved: { type: 'boolean' },
  reason: { type: 'string', maxLength: 1000 },
  // once: this call; task / session: the same tool and arguments no longer ask for the rest of the task / session.
  scope: { type: 'string', enum: [...APPROVAL_SCOPES] },
} as const;

export const decisionBody = {
  type: 'object',
  additionalProperties: false,
  required: ['approved'],
  properties: {
    ...decisionFields,
    // The amended arguments (approve only), checked against the tool's JSON schema by the service.
    modifier: { type: 'object', maxProperties: 64 },
  },
} as const;

/** POST /api/approvals/decisions: one decision for the approvals named by `ids`, or the pending ones `filter` matches. */
export const bulkDecisionBody = {
  type: 'object',
  additionalProperties: false,
  required: ['approved'],
  properties: {
    ...decisionFields,
    ids: { type: 'array', minItems: 1, maxItems: BULK_MAX, items: approvalParams.properties.approval_id },
    filter: {
      type: 'object',
      additionalProperties: false,
      required: ['workspace_id'],
      properties: { workspace_id: workspaceId, task_id: uuid, session_id: uuid, run_id: runId, tool: { type: 'string', minLength: 1, maxLength: 128 } },
    },
  },
} as const;

export const inboxStreamQuery = {
  type: 'object',
  additionalProperties: false,
  required: ['workspace_id'],
  properties: { workspace_id: workspaceId, after_seq: { type: 'integer', minimum: 0 } },
} as const;

// Response schemas (see tasks.schema.ts): every field a handler returns is named, so none is dropped.

/** An approval as the API shows it: a team task's, a session's or a VM run's (whose owner id is set). */
const approvalSchema = {
  type: 'object', additionalProperties: false,
  required: ['approval_id', 'workspace_id', 'task_id', 'worker_id', 'call_id', 'tool_name', 'arguments', 'reason', 'timeout_secs', 'status', 'created_at', 'expires_at'],
  properties: {
    approval_id: { type: 'string' },
    workspace_id: { type: 'string' },
    task_id: { type: 'string' },
    session_id: { type: 'string' },
    run_id: { type: 'string' },
    worker_id: { type: 'string' },
    call_id: { type: 'string' },
    order: { type: 'integer' },
    tool_name: { type: 'string' },
    arguments: { type: 'string' },
    reason: { type: 'string' },
    timeout_secs: { type: 'integer' },
    status: { type: 'string', enum: [...APPROVAL_STATUSES] },
    /** ms since the epoch */
    created_at: { type: 'integer' },
    expires_at: { type: 'integer' },
    decided_at: { type: 'integer' },
    decided_by: { type: 'string' },
    decision_reason: { type: 'string' },
    modifier: { type: 'string' },
    scope: { type: 'string', enum: [...APPROVAL_SCOPES] },
    parameters_schema: { type: 'string' },
  },
} as const;

export const approvalResponse = closedObject({ approval: approvalSchema });

export const policyResponse = closedObject({ policy: approvalPolicySchema });

export const approvalListResponse = closedObject({ approvals: { type: 'array', items: approvalSchema }, next_cursor: { type: ['string', 'null'] } });

export const bulkDecisionResponse = {
  type: 'object', additionalProperties: false,
  required: ['results'],
  properties: {
    results: {
      type: 'array',
      items: {
        type: 'object', additionalProperties: false,
        required: ['approval_id', 'outcome'],
        properties: {
          approval_id: { type: 'string' },
          outcome: { type: 'string', enum: ['decided', 'conflict', 'not_found'] },
          approval: approvalSchema,
          error: { type: 'string' },
        },
      },
    },
  },
} as const;

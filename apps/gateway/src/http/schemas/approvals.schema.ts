// JSON schemas of the approvals API. Bodies are strict; querystrings are coerced from text.
import { APPROVAL_STATUSES } from '@cadre/protocol';
import { approvalPolicySchema } from './tasks.schema.ts';

const workspaceId = { type: 'string', minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$' } as const;

export const policyParams = { type: 'object', required: ['workspace_id'], properties: { workspace_id: workspaceId } } as const;
export const policyBody = approvalPolicySchema;

export const approvalParams = {
  type: 'object',
  required: ['approval_id'],
  properties: { approval_id: { type: 'string', minLength: 1, maxLength: 100 } },
} as const;

export const listApprovalsQuery = {
  type: 'object',
  additionalProperties: false,
  required: ['workspace_id'],
  properties: {
    workspace_id: workspaceId,
    status: { type: 'string', enum: [...APPROVAL_STATUSES] },
    task_id: { type: 'string', pattern: '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' },
    session_id: { type: 'string', pattern: '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' },
  },
} as const;

export const decisionBody = {
  type: 'object',
  additionalProperties: false,
  required: ['approved'],
  properties: { approved: { type: 'boolean' }, reason: { type: 'string', maxLength: 1000 } },
} as const;

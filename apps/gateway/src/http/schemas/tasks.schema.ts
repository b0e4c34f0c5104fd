// JSON schemas of the tasks API, one per part; Fastify validates requests against them before a handler runs.
// Bodies are strict (unknown fields are an error, types are not coerced); querystrings are coerced from text.

const text = (maxLength: number) => ({ type: 'string', minLength: 1, maxLength }) as const;

/** Ordered approval rules (first match wins); see docs in README "Tool approvals". */
export const approvalPolicySchema = {
  type: 'object',
  additionalProperties: false,
  required: ['rules'],
  properties: {
    rules: {
      type: 'array',
      maxItems: 64,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['tool', 'action'],
        properties: {
          tool: { type: 'string', minLength: 1, maxLength: 128 },
          // Conditions on the call's top-level arguments, all of which must hold (see approval-policy.ts).
          when: {
            type: 'object',
            maxProperties: 16,
            propertyNames: { maxLength: 128 },
            // Exactly one of equals / glob / regex.
            additionalProperties: {
              oneOf: [
                { type: 'object', additionalProperties: false, required: ['equals'], properties: { equals: {} } },
                { type: 'object', additionalProperties: false, required: ['glob'], properties: { glob: { type: 'string', maxLength: 1000 } } },
                { type: 'object', additionalProperties: false, required: ['regex'], properties: { regex: { type: 'string', maxLength: 500 } } },
              ],
            },
          },
          action: { type: 'string', enum: ['allow', 'ask', 'deny'] },
          timeout_secs: { type: 'integer', minimum: 1, maximum: 7 * 24 * 3600 },
          reason: { type: 'string', maxLength: 1000 },
        },
      },
    },
  },
} as const;

export const LIMITS = { goal: 20_000, instructions: 20_000, workers: 16, tools: 16, maxWorkers: 16 } as const;

export const createTaskBody = {
  type: 'object',
  additionalProperties: false,
  required: ['workspace_id', 'goal'],
  properties: {
    workspace_id: { type: 'string', minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$' },
    goal: text(LIMITS.goal),
    team: {
      type: 'object',
      additionalProperties: false,
      properties: {
        lead: {
          type: 'object',
          additionalProperties: false,
          properties: { instructions: text(LIMITS.instructions), model: text(200) },
        },
        workers: {
          type: 'array',
          maxItems: LIMITS.workers,
          items: {
            type: 'object',
            additionalProperties: false,
            required: ['role'],
            properties: {
              role: text(64),
              instructions: text(LIMITS.instructions),
              model: text(200),
              tools: { type: 'array', maxItems: LIMITS.tools, uniqueItems: true, items: text(64) },
              // This worker's own rules, checked before the task's.
              approval_policy: approvalPolicySchema,
            },
          },
        },
        max_workers: { type: 'integer', minimum: 1, maximum: LIMITS.maxWorkers },
        approval_policy: approvalPolicySchema,
      },
    },
    metadata: { type: 'object', maxProperties: 64 },
  },
} as const;

export const taskParams = {
  type: 'object',
  required: ['task_id'],
  properties: { task_id: { type: 'string', maxLength: 64 } },
} as const;

export const eventsQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    after_seq: { type: 'integer', minimum: 0 },
    limit: { type: 'integer', minimum: 1, maximum: 1000 },
  },
} as const;

export const streamQuery = {
  type: 'object',
  additionalProperties: false,
  properties: { after_seq: { type: 'integer', minimum: 0 } },
} as const;

export const cancelBody = {
  type: ['object', 'null'],
  additionalProperties: false,
  properties: { reason: text(500) },
} as const;

export const listTasksQuery = {
  type: 'object',
  additionalProperties: false,
  required: ['workspace_id'],
  properties: {
    workspace_id: createTaskBody.properties.workspace_id,
    status: { type: 'string', enum: ['queued', 'running', 'completed', 'failed', 'cancelled'] },
    cursor: { type: 'string', minLength: 1, maxLength: 200 },
    limit: { type: 'integer', minimum: 1, maximum: 200 },
  },
} as const;


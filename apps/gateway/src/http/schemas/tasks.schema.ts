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


// Response schemas: Fastify serializes each answer with them (fast-json-stringify) and leaves out every field
// they do not name, so nothing internal (a roster's lease, a worker's encoded approval rules) reaches a client.
// Nullable fields say so: a string schema would print null as "".

const nullable = <T extends 'string' | 'integer'>(type: T) => ({ type: [type, 'null'] }) as const;

export const usageSchema = {
  type: 'object', additionalProperties: false,
  required: ['prompt_tokens', 'completion_tokens', 'total_tokens'],
  properties: { prompt_tokens: { type: 'integer' }, completion_tokens: { type: 'integer' }, total_tokens: { type: 'integer' } },
} as const;

const taskStatus = { type: 'string', enum: ['queued', 'running', 'completed', 'failed', 'cancelled'] } as const;

/** A task as GET /api/tasks/:task_id shows it: its team as asked for (no encoded rules), its roster without leases. */
export const taskSchema = {
  type: 'object', additionalProperties: false,
  required: ['task_id', 'workspace_id', 'goal', 'status', 'mode', 'team', 'metadata', 'created_at', 'updated_at', 'started_at', 'finished_at', 'result', 'failure_reason', 'usage', 'last_seq', 'workers'],
  properties: {
    task_id: { type: 'string' },
    workspace_id: { type: 'string' },
    goal: { type: 'string' },
    status: taskStatus,
    mode: { type: 'string', enum: ['named', 'planned'] },
    team: {
      type: 'object', additionalProperties: false,
      properties: {
        lead: { type: 'object', additionalProperties: false, properties: { instructions: { type: 'string' }, model: { type: 'string' } } },
        workers: {
          type: 'array',
          items: { type: 'object', additionalProperties: false, properties: { role: { type: 'string' }, instructions: { type: 'string' }, model: { type: 'string' }, tools: { type: 'array', items: { type: 'string' } } } },
        },
        max_workers: { type: 'integer' },
        approval_policy: approvalPolicySchema,
      },
    },
    metadata: { type: 'object', additionalProperties: true },
    created_at: { type: 'string' },
    updated_at: { type: 'string' },
    started_at: nullable('string'),
    finished_at: nullable('string'),
    result: nullable('string'),
    failure_reason: nullable('string'),
    usage: { anyOf: [usageSchema, { type: 'null' }] },
    last_seq: { type: 'integer' },
    workers: {
      type: 'array',
      items: {
        type: 'object', additionalProperties: false,
        required: ['worker_id', 'role', 'status', 'attempt', 'host_id', 'result', 'failure_reason', 'usage'],
        properties: {
          worker_id: { type: 'string' },
          role: { type: 'string' },
          status: { type: 'string' },
          attempt: { type: 'integer' },
          host_id: nullable('string'),
          result: nullable('string'),
          failure_reason: nullable('string'),
          usage: { anyOf: [usageSchema, { type: 'null' }] },
        },
      },
    },
  },
} as const;

export const taskResponse = { type: 'object', additionalProperties: false, required: ['task'], properties: { task: taskSchema } } as const;

export const taskListResponse = {
  type: 'object', additionalProperties: false,
  required: ['tasks', 'next_cursor'],
  properties: {
    tasks: {
      type: 'array',
      items: {
        type: 'object', additionalProperties: false,
        required: ['task_id', 'workspace_id', 'goal', 'status', 'mode', 'team_size', 'created_at', 'updated_at', 'finished_at', 'failure_reason', 'last_seq'],
        properties: {
          task_id: { type: 'string' },
          workspace_id: { type: 'string' },
          goal: { type: 'string' },
          status: taskStatus,
          mode: { type: 'string' },
          team_size: { type: 'integer' },
          created_at: { type: 'string' },
          updated_at: { type: 'string' },
          finished_at: nullable('string'),
          failure_reason: nullable('string'),
          last_seq: { type: 'integer' },
        },
      },
    },
    next_cursor: nullable('string'),
  },
} as const;

/** One entry of a task's log (the polling and SSE shape); the payload is the event type's own. */
export const teamEventSchema = {
  type: 'object', additionalProperties: false,
  required: ['seq', 'timestamp', 'event_type', 'worker_id', 'attempt', 'payload'],
  properties: {
    seq: { type: 'integer' },
    timestamp: { type: 'string' },
    event_type: { type: 'string' },
    worker_id: nullable('string'),
    attempt: { type: 'integer' },
    payload: {},
  },
} as const;

export const eventsResponse = {
  type: 'object', additionalProperties: false,
  required: ['task_id', 'events', 'next_after_seq'],
  properties: { task_id: { type: 'string' }, events: { type: 'array', items: teamEventSchema }, next_after_seq: { type: 'integer' } },
} as const;

export const workspaceListResponse = {
  type: 'object', additionalProperties: false, required: ['workspaces'],
  properties: { workspaces: { type: 'array', items: { type: 'string' } } },
} as const;

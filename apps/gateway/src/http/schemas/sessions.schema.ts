// JSON schemas of the HTTP session API, one per part. Shapes and sizes here; content rules (tool schemas, the
// exit_code/success rule) are the session engine's, so every edge refuses the same things.
import { INTERRUPT_MODES, SESSION_STATUSES, STEERING_MODES } from '@cadre/protocol';
import { approvalPolicySchema } from './tasks.schema.ts';
import { closedObject } from './closed-object.ts';

const text = (maxLength: number) => ({ type: 'string', maxLength }) as const;

const tool = {
  type: 'object',
  additionalProperties: false,
  required: ['name'],
  properties: {
    name: text(64),
    description: text(4096),
    parameters: { type: 'object' },
    timeout_ms: { type: 'integer', minimum: 0, maximum: 3_600_000 },
    category: text(32),
  },
} as const;
const tools = { type: 'array', maxItems: 64, items: tool } as const;

export const createSessionBody = {
  type: 'object',
  additionalProperties: false,
  required: ['workspace_id'],
  properties: {
    workspace_id: { type: 'string', minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$' },
    model: { type: 'string', minLength: 1, maxLength: 200 },
    tools,
    history: {
      type: 'array',
      maxItems: 500,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['role', 'content'],
        properties: { role: { enum: ['user', 'assistant', 'system'] }, content: text(100_000) },
      },
    },
    project_context: { type: 'array', maxItems: 32, items: text(100_000) },
    system_context: text(20_000),
    max_context_tokens: { type: 'integer', minimum: 256, maximum: 10_000_000 },
    // The session's own approval rules, checked before the workspace's.
    approval_policy: approvalPolicySchema,
  },
} as const;

export const messageBody = {
  type: 'object',
  additionalProperties: false,
  required: ['content'],
  properties: {
    content: { type: 'string', minLength: 1, maxLength: 100_000 },
    message_id: { type: 'string', minLength: 1, maxLength: 128 },
    tools,
    system_context: text(20_000),
    /** Images the model sees with the text: base64 bytes (type and size are checked by the engine). */
    images: {
      type: 'array',
      maxItems: 16,
      items: closedObject({ mime_type: { type: 'string', maxLength: 100 }, data: { type: 'string', minLength: 1 } }),
    },
    /** While a turn runs: queue the message as a steer or a follow-up instead of refusing it (409). */
    streaming_behavior: { enum: ['steer', 'follow_up'] },
  },
} as const;

export const toolResultBody = {
  type: 'object',
  additionalProperties: false,
  required: ['tool_call_id', 'success', 'result'],
  properties: {
    tool_call_id: { type: 'string', minLength: 1, maxLength: 128 },
    success: { type: 'boolean' },
    result: text(1_000_000),
    exit_code: { type: 'integer' },
    truncated: { type: 'boolean' },
    duration_ms: { type: 'integer', minimum: 0 },
  },
} as const;

export const registerToolsBody = {
  type: 'object',
  additionalProperties: false,
  required: ['tools'],
  properties: { source: { type: 'string', maxLength: 64 }, tools, system_context: text(20_000) },
} as const;

export const reasonBody = {
  type: ['object', 'null'],
  additionalProperties: false,
  properties: { reason: { type: 'string', minLength: 1, maxLength: 500 } },
} as const;

export const modelBody = {
  type: 'object',
  additionalProperties: false,
  required: ['model'],
  properties: { model: { type: 'string', minLength: 1, maxLength: 200 } },
} as const;

export const sessionParams = {
  type: 'object',
  required: ['session_id'],
  properties: { session_id: { type: 'string', maxLength: 64 } },
} as const;

/** A steer or follow-up (POST /steer, /follow-ups). */
export const inputBody = {
  type: 'object',
  additionalProperties: false,
  required: ['content'],
  properties: {
    content: { type: 'string', minLength: 1, maxLength: 100_000 },
    input_id: { type: 'string', minLength: 1, maxLength: 128 },
  },
} as const;

/** abort, or abort-and-prompt with `prompt`. */
export const abortBody = {
  type: ['object', 'null'],
  additionalProperties: false,
  properties: {
    prompt: {
      type: 'object',
      additionalProperties: false,
      required: ['content'],
      properties: { content: { type: 'string', minLength: 1, maxLength: 100_000 }, message_id: { type: 'string', minLength: 1, maxLength: 128 } },
    },
  },
} as const;

export const modesBody = {
  type: 'object',
  additionalProperties: false,
  minProperties: 1,
  properties: {
    steering_mode: { enum: ['one-at-a-time', 'all'] },
    follow_up_mode: { enum: ['one-at-a-time', 'all'] },
    interrupt_mode: { enum: ['immediate', 'wait'] },
  },
} as const;


// Response schemas (see tasks.schema.ts): every field a handler returns is named, so none is dropped.

const str = { type: 'string' } as const;
const queuedInput = closedObject({ input_id: str, content: str, queued_at: str });

const sessionSchema = closedObject({
  session_id: str,
  workspace_id: str,
  status: { type: 'string', enum: [...SESSION_STATUSES] },
  model: str,
  tools: {
    type: 'array',
    items: closedObject({ name: str, description: str, parameters: { type: 'object', additionalProperties: true }, timeout_ms: { type: 'integer' }, source: str, category: str }),
  },
  project_context: { type: 'array', items: str },
  system_context: str,
  max_context_tokens: { type: 'integer' },
  turn: { type: 'integer' },
  message_id: { type: ['string', 'null'] },
  pending_tool_calls: {
    type: 'array',
    items: closedObject({ tool_call_id: str, tool_name: str, deadline: str }),
  },
  created_at: str,
  updated_at: str,
  closed_reason: { type: ['string', 'null'] },
  last_seq: { type: 'integer' },
  owner: { type: ['string', 'null'] },
  steering_mode: { type: 'string', enum: [...STEERING_MODES] },
  follow_up_mode: { type: 'string', enum: [...STEERING_MODES] },
  interrupt_mode: { type: 'string', enum: [...INTERRUPT_MODES] },
  queued_steering: { type: 'array', items: queuedInput },
  queued_follow_ups: { type: 'array', items: queuedInput },
});

export const sessionResponse = closedObject({ session: sessionSchema });

export const modelsResponse = {
  type: 'object', additionalProperties: false,
  // `default` is the first model (absent only if none is configured).
  required: ['models'],
  properties: { models: { type: 'array', items: str }, default: str },
} as const;

/** A steer or follow-up: queued behind the running turn (with its place), or the start of a turn. */
const queuedInputOutcome = {
  session_id: str,
  input_id: str,
  kind: { type: 'string', enum: ['steer', 'follow_up'] },
  outcome: { type: 'string', enum: ['queued', 'started'] },
  position: { type: 'integer' },
} as const;

export const queuedInputResponse = {
  type: 'object', additionalProperties: false,
  required: ['session_id', 'input_id', 'kind', 'outcome'],
  properties: queuedInputOutcome,
} as const;

/** A message starts a turn; with streaming_behavior, one sent while a turn runs is queued as a steer or follow-up. */
export const messageResponse = {
  type: 'object', additionalProperties: false,
  required: ['session_id', 'message_id'],
  properties: { ...queuedInputOutcome, message_id: str },
} as const;

// Chat messages as the model API has them, any shape.
export const messagesResponse = closedObject({ session_id: str, messages: { type: 'array', items: {} } });

export const abortResponse = closedObject({ session_id: str, aborted: { type: 'boolean' }, dropped: { type: 'integer' }, message_id: { type: ['string', 'null'] } });

export const toolResultResponse = closedObject({ session_id: str, resumed: { type: 'boolean' } });

export const registerToolsResponse = closedObject({ session_id: str, tool_count: { type: 'integer' } });

export const cancelResponse = closedObject({ session_id: str, cancelled: { type: 'boolean' } });

export const sessionEventsResponse = closedObject({
  session_id: str,
  events: {
    type: 'array',
    items: closedObject({ seq: { type: 'integer' }, timestamp: str, event_type: str, payload: {} }),
  },
  next_after_seq: { type: 'integer' },
});

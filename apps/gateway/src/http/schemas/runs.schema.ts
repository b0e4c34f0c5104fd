// JSON schemas of the runs API (the WindieOS "Runs / VM Control" contract). Field names are the original's, and
// so is what may be null: every field the original declares Optional takes an explicit null. Cadre's additions
// are optional (`acked_command_ids`, `lease_id`, `events`, `worker_id` and `batch_id` on relays).
import { CONTROL_ACTIONS, CONTROL_MODES, RUN_STATUSES } from '@cadre/protocol';
import { closedObject } from './closed-object.ts';

const text = (maxLength: number) => ({ type: 'string', maxLength }) as const;
/** An Optional[str] of the original: a string, null, or absent. */
const optionalText = (maxLength: number) => ({ type: ['string', 'null'], maxLength }) as const;
const id = { type: 'string', minLength: 1, maxLength: 128 } as const;
const workspaceId = { type: 'string', minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$' } as const;

export const createRunBody = {
  type: 'object',
  additionalProperties: false,
  required: ['workspace_id', 'query'],
  properties: {
    workspace_id: workspaceId,
    agent_id: optionalText(128),
    query: { type: 'string', minLength: 1, maxLength: 20_000 },
    requested_by: optionalText(128),
    files: {
      type: 'array',
      maxItems: 32,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['artifact_id'],
        properties: { artifact_id: id, filename: optionalText(255), content_type: optionalText(128) },
      },
    },
    metadata: { type: 'object', maxProperties: 64 },
  },
} as const;

/** Any run id form is looked up (an unknown one is 404, as the original), so the path only bounds its length. */
export const runParams = {
  type: 'object',
  required: ['run_id'],
  properties: { run_id: { type: 'string', maxLength: 200 } },
} as const;

export const listRunsQuery = {
  type: 'object',
  additionalProperties: false,
  required: ['workspace_id'],
  properties: {
    workspace_id: id,
    status: { type: 'string', enum: ['awaiting_worker', 'queued', 'running', 'paused', 'stopped', 'completed', 'failed'] },
  },
} as const;

export const heartbeatBody = {
  type: 'object',
  additionalProperties: false,
  required: ['workspace_id', 'worker_id'],
  properties: {
    workspace_id: workspaceId,
    worker_id: id,
    vm_id: text(128),
    user_id: text(128),
    session_id: optionalText(128),
    agent_id: optionalText(128),
    status: { type: 'string', minLength: 1, maxLength: 32, default: 'ready' },
    metadata: { type: 'object', maxProperties: 64 },
    acked_command_ids: { type: 'array', maxItems: 1000, items: id },
  },
} as const;

export const controlBody = {
  type: 'object',
  additionalProperties: false,
  required: ['action'],
  properties: {
    action: { type: 'string', enum: ['pause', 'resume', 'stop', 'set-control-mode'] },
    control_mode: { type: ['string', 'null'], enum: ['agent_only', 'shared_control', 'human_override', null] },
    requested_by: optionalText(128),
  },
} as const;

export const stopAllBody = {
  type: ['object', 'null'],
  additionalProperties: false,
  properties: { workspace_id: { ...workspaceId, type: ['string', 'null'] }, requested_by: optionalText(128) },
} as const;

export const dispatchedBody = {
  type: 'object',
  additionalProperties: false,
  required: ['worker_id'],
  properties: { worker_id: id, user_id: text(128), turn_ref: text(128), conversation_ref: optionalText(160), lease_id: text(64) },
} as const;

const relayedEvent = {
  type: 'object',
  additionalProperties: false,
  required: ['event_type'],
  properties: { event_type: { type: 'string', minLength: 1, maxLength: 64 }, source: text(64), payload: {} },
} as const;

/** One event as in the original, or Cadre's batch `{events: [...]}`; both may name the relaying worker. */
export const relayBody = {
  type: 'object',
  additionalProperties: false,
  properties: {
    ...relayedEvent.properties,
    events: { type: 'array', minItems: 1, maxItems: 500, items: relayedEvent },
    worker_id: id,
    lease_id: text(64),
    /** Names a batch so a retry after a lost reply is not stored twice. */
    batch_id: { type: 'string', minLength: 1, maxLength: 64 },
  },
} as const;

export const eventsQuery = {
  type: 'object',
  additionalProperties: false,
  properties: { after_seq: { type: 'integer', minimum: 0 }, limit: { type: 'integer', minimum: 1, maximum: 1000 } },
} as const;

/** Cadre's approvals for VM runs: the holder proposes a turn's tool calls (the model's order). */
export const proposeBody = {
  type: 'object',
  additionalProperties: false,
  required: ['worker_id', 'lease_id', 'calls'],
  properties: {
    worker_id: id,
    lease_id: { type: 'string', minLength: 1, maxLength: 64 },
    calls: {
      type: 'array',
      minItems: 1,
      maxItems: 64,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['call_id', 'tool_name', 'arguments'],
        properties: {
          call_id: { type: 'string', minLength: 1, maxLength: 200 }, tool_name: { type: 'string', minLength: 1, maxLength: 128 }, arguments: { type: 'string', maxLength: 100_000 },
          // The tool's JSON schema, so an approver may amend the arguments (checked by the service; size-capped there).
          parameters_schema: { type: 'object' },
        },
      },
    },
  },
} as const;

export const runApprovalParams = {
  type: 'object',
  required: ['run_id', 'approval_id'],
  properties: { run_id: { type: 'string', maxLength: 200 }, approval_id: { type: 'string', minLength: 1, maxLength: 100 } },
} as const;


// Response schemas: every field of the original's answers, its nulls included (WindieOS clients read them as
// they are), and Cadre's additions. A field a handler returns and a schema forgets would be dropped: tests check
// every answer against its handler's object (response-check.ts).

const nullableText = { type: ['string', 'null'] } as const;
const anyObject = { type: 'object', additionalProperties: true } as const;

const runFile = closedObject({ artifact_id: { type: 'string' }, filename: nullableText, content_type: nullableText });

const runWorker = closedObject({
  worker_id: { type: 'string' }, vm_id: nullableText, session_id: nullableText, agent_id: nullableText, user_id: nullableText,
  status: { type: 'string' }, metadata: anyObject, last_heartbeat_at: { type: 'string' },
});

export const runSchema = closedObject({
  run_id: { type: 'string' },
  workspace_id: { type: 'string' },
  agent_id: nullableText,
  query: { type: 'string' },
  requested_by: nullableText,
  files: { type: 'array', items: runFile },
  metadata: anyObject,
  conversation_ref: { type: 'string' },
  query_message_id: nullableText,
  status: { type: 'string', enum: [...RUN_STATUSES] },
  control_mode: { type: 'string', enum: [...CONTROL_MODES] },
  worker: { anyOf: [runWorker, { type: 'null' }] },
  created_at: { type: 'string' },
  updated_at: { type: 'string' },
  last_heartbeat_at: nullableText,
  last_event_seq: { type: 'integer' },
  attempts: { type: 'integer' },
  assigned_at: nullableText,
  dispatched_at: nullableText,
  finished_at: nullableText,
  error: nullableText,
});

const runEventSchema = closedObject({ seq: { type: 'integer' }, timestamp: { type: 'string' }, event_type: { type: 'string' }, source: { type: 'string' }, payload: {} });

export const createRunResponse = closedObject({ run: runSchema, events: { type: 'array', items: runEventSchema } });

export const runListResponse = closedObject({ runs: { type: 'array', items: runSchema } });

/** A write to one run: the run after it and the event it appended. */
export const runWithEventResponse = closedObject({ run: runSchema, latest_event: runEventSchema });

export const relayResponse = closedObject({ ...runWithEventResponse.properties, last_seq: { type: 'integer' } });

export const runEventsResponse = closedObject({ run_id: { type: 'string' }, events: { type: 'array', items: runEventSchema }, next_after_seq: { type: 'integer' } });

const assignedRun = closedObject({
  run_id: { type: 'string' }, workspace_id: { type: 'string' }, agent_id: nullableText, conversation_ref: { type: 'string' }, query: { type: 'string' },
  requested_by: nullableText, files: { type: 'array', items: runFile }, metadata: anyObject, control_mode: { type: 'string', enum: [...CONTROL_MODES] },
  lease_id: { type: 'string' },
});

const controlCommand = closedObject({
  command_id: { type: 'string' }, run_id: { type: 'string' }, action: { type: 'string', enum: [...CONTROL_ACTIONS] },
  control_mode: { type: 'string', enum: [...CONTROL_MODES] }, requested_by: nullableText, created_at: { type: 'string' },
});

export const heartbeatResponse = closedObject({
  worker: closedObject({
    worker_id: { type: 'string' }, workspace_id: { type: 'string' }, vm_id: nullableText, user_id: nullableText, session_id: nullableText,
    agent_id: nullableText, status: { type: 'string' }, metadata: anyObject, last_heartbeat_at: { type: 'string' }, current_run_id: nullableText,
  }),
  assigned_run: { anyOf: [assignedRun, { type: 'null' }] },
  control_commands: { type: 'array', items: controlCommand },
  heartbeat_interval_ms: { type: 'integer' },
});

export const stopAllResponse = closedObject({
  workspace_id: nullableText,
  stopped_run_ids: { type: 'array', items: { type: 'string' } },
  count: { type: 'integer' },
  stopped_task_ids: { type: 'array', items: { type: 'string' } },
});

const verdict = {
  type: 'object', additionalProperties: false,
  required: ['call_id', 'action'],
  properties: {
    call_id: { type: 'string' },
    action: { type: 'string', enum: ['allow', 'deny', 'ask'] },
    reason: { type: 'string' },
    approval_id: { type: 'string' },
    timeout_secs: { type: 'integer' },
    expires_at: { type: 'integer' },
  },
} as const;

export const proposeResponse = closedObject({ verdicts: { type: 'array', items: verdict } });


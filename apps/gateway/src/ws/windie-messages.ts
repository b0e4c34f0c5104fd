// The WindieOS /ws wire format (../../../../shared reference 002, "WebSocket Endpoint"): the handshake (no
// envelope), the {id, type, payload} envelope, and session log events turned into server messages.
import { randomUUID } from 'node:crypto';
import { applyAnswerEvent, emptyAnswer, type Answer } from '@cadre/board';
import type { SessionEvent } from '@cadre/protocol';
import { parseArguments } from '@cadre/session';

export interface Envelope {
  id: string;
  type: string;
  payload: Record<string, unknown>;
}

export interface ManifestTool {
  name: string;
  description?: string;
  execution_target?: string;
  schema?: Record<string, unknown>;
  argument_resolution?: string;
}

export interface Handshake {
  user_id?: string;
  manifest: ManifestTool[] | null;
}

/** A protocol refusal: before the handshake it closes the socket (1008), after it is an `error` message. */
export class WindieProtocolError extends Error {}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const HANDSHAKE_FIELDS = new Set(['type', 'user_id', 'agent_definition', 'timestamp']);
// Top-level handshake fields the original removed in favour of agent_definition: still sent by old clients.
const REMOVED_FIELDS = new Set(['operating_system', 'available_tools', 'available_coordinate_methods', 'requested_agent_policy']);

export function parseJson(raw: string): unknown {
  try {
    return JSON.parse(raw) as unknown;
  } catch {
    throw new WindieProtocolError('invalid JSON');
  }
}

/** Checks the handshake's shape; the manifest's tools are judged one by one later (accepted / rejected). */
export function parseHandshake(raw: string): Handshake {
  const msg = parseJson(raw);
  if (!isObject(msg) || msg.type !== 'handshake') throw new WindieProtocolError('the first message must be {"type":"handshake", ...}');
  for (const key of Object.keys(msg)) {
    if (REMOVED_FIELDS.has(key)) throw new WindieProtocolError(`handshake field "${key}" was removed: send agent_definition`);
    if (!HANDSHAKE_FIELDS.has(key)) throw new WindieProtocolError(`handshake has an unknown field "${key.slice(0, 64)}"`);
  }
  if (msg.user_id !== undefined && (typeof msg.user_id !== 'string' || msg.user_id === '' || msg.user_id.length > 128)) {
    throw new WindieProtocolError('handshake user_id must be a non-empty string of at most 128 characters');
  }
  const definition = msg.agent_definition;
  if (definition !== undefined && !isObject(definition)) throw new WindieProtocolError('agent_definition must be an object');
  const tools = definition?.tools;
  if (tools !== undefined && !isObject(tools)) throw new WindieProtocolError('agent_definition.tools must be an object');
  const manifest = tools?.client_manifest;
  if (manifest === undefined) return { ...(msg.user_id !== undefined && { user_id: msg.user_id as string }), manifest: null };
  if (!isObject(manifest) || !Array.isArray(manifest.tools)) throw new WindieProtocolError('agent_definition.tools.client_manifest.tools must be an array');
  if (manifest.tools.length > 64) throw new WindieProtocolError('client_manifest: at most 64 tools');
  manifest.tools.forEach((t, i) => {
    if (!isObject(t) || typeof t.name !== 'string') throw new WindieProtocolError(`client_manifest.tools[${i}] must be an object with a name`);
  });
  return { ...(msg.user_id !== undefined && { user_id: msg.user_id as string }), manifest: manifest.tools as ManifestTool[] };
}

const ENVELOPE_FIELDS = new Set(['id', 'type', 'payload', 'timestamp']);

export function parseEnvelope(raw: string): Envelope {
  const msg = parseJson(raw);
  if (!isObject(msg)) throw new WindieProtocolError('a message must be a JSON object {id, type, payload}');
  for (const key of Object.keys(msg)) if (!ENVELOPE_FIELDS.has(key)) throw new WindieProtocolError(`unknown top-level field "${key.slice(0, 64)}"`);
  if (typeof msg.id !== 'string' || msg.id === '' || msg.id.length > 128) throw new WindieProtocolError('id must be a non-empty string');
  if (typeof msg.type !== 'string' || msg.type === '') throw new WindieProtocolError('type must be a non-empty string');
  if (!isObject(msg.payload)) throw new WindieProtocolError('payload must be an object');
  return { id: msg.id, type: msg.type, payload: msg.payload };
}

/** Checks a payload's fields against the names the reference gives; required ones must be present. */
export function checkPayload(type: string, payload: Record<string, unknown>, known: readonly string[], required: readonly string[]): void {
  for (const key of Object.keys(payload)) if (!known.includes(key)) throw new WindieProtocolError(`${type}: unknown payload field "${key.slice(0, 64)}"`);
  for (const key of required) if (payload[key] === undefined || payload[key] === null) throw new WindieProtocolError(`${type}: payload.${key} is required`);
}

export function serverMessage(type: string, payload: Record<string, unknown>): string {
  return JSON.stringify({ id: randomUUID(), type, payload });
}

/** tool-call request ids are opaque to clients; ours carry the session and call, so any socket can answer. */
export function encodeRequestId(sessionId: string, toolCallId: string): string {
  return Buffer.from(`${sessionId}\n${toolCallId}`).toString('base64url');
}

export function decodeRequestId(requestId: string): { sessionId: string; toolCallId: string } {
  const [sessionId, toolCallId] = Buffer.from(requestId, 'base64url').toString().split('\n');
  if (!sessionId || !toolCallId) throw new WindieProtocolError(`unknown request_id "${requestId.slice(0, 64)}"`);
  return { sessionId, toolCallId };
}

/**
 * A session event as WindieOS server messages (none for events the protocol has no message for). `answer`
 * collects the turn's text for streaming-complete's final_response.
 */
export function toServerMessages(sessionId: string, event: SessionEvent, answer: Answer): string[] {
  applyAnswerEvent(answer, event);
  switch (event.event_type) {
    case 'text_delta':
      return [serverMessage('streaming-response', { text: event.payload.content })];
    case 'thinking_delta':
      return [serverMessage('llm-thought', { status: event.payload.content })];
    case 'tool_request':
      return [serverMessage('tool-call', {
        tool_name: event.payload.tool_name, parameters: event.payload.parameters,
        request_id: encodeRequestId(sessionId, event.payload.tool_call_id), metadata: { tool_call_id: event.payload.tool_call_id },
      })];
    case 'tool_result': {
      const p = event.payload;
      return [serverMessage('tool-output', {
        tool_name: p.tool_name, success: p.success, execution_time: p.duration_ms === undefined ? null : p.duration_ms / 1000,
        output: p.result, error: p.success ? null : p.result, metadata: { tool_call_id: p.tool_call_id },
      })];
    }
    case 'turn_complete': {
      const u = event.payload.usage;
      const final = answer.text;
      Object.assign(answer, emptyAnswer());
      return [
        serverMessage('token-count', {
          prompt_tokens: u.prompt_tokens, visible_output_tokens: u.completion_tokens, thinking_tokens: null,
          output_tokens_total: u.completion_tokens, total_tokens: u.total_tokens, conversation_tokens: u.total_tokens, usage_source: 'provider',
        }),
        serverMessage('streaming-complete', { final_response: final }),
      ];
    }
    case 'approval_requested': {
      // Cadre's approval pair (WindieOS has none): approval-request, answered by approval-response.
      const p = event.payload;
      return [serverMessage('approval-request', {
        request_id: p.approval_id, tool_name: p.tool_name, parameters: parseArguments(p.arguments), reason: p.reason, timeout_secs: p.timeout_secs,
        expires_at: p.expires_at, metadata: { tool_call_id: p.tool_call_id, index: p.index, count: p.count },
      })];
    }
    case 'approval_resolved': {
      const p = event.payload;
      return [serverMessage('approval-resolved', {
        request_id: p.approval_id, approved: p.approved, status: p.status, reason: p.reason, ...(p.modifier && { modifier: parseArguments(p.modifier) }), metadata: { tool_call_id: p.tool_call_id },
      })];
    }
    case 'session_error':
      return [serverMessage('error', { message: event.payload.message })];
    default:
      return [];
  }
}

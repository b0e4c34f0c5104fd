// The session event model: one ordered log per session, served with the same seq by every edge (roz
// StreamSession, HTTP polling, SSE; later WebSocket and stdio). Edges translate these events into their own frames.
import type { ApprovalStatus, TokenUsage } from './team-events.ts';

/** idle: waiting for a user message · running: a turn holds (or is about to hold) a worker · waiting_tool: parked
 * on client tool results (no worker held) · closed: terminal. */
export const SESSION_STATUSES = ['idle', 'running', 'waiting_tool', 'closed'] as const;
export type SessionStatus = (typeof SESSION_STATUSES)[number];

/** What the agent is doing, as roz's ActivityUpdate.state. */
export type ActivityState = 'thinking' | 'calling_tool' | 'idle' | 'waiting_approval';

/**
 * Why a turn's attempt ended unfinished: its worker died, shut down past its drain deadline, or Redis could not take
 * its writes (down or failing over) and it handed the turn back.
 */
export type AttemptLostReason = 'worker_lost' | 'worker_shutdown' | 'redis_unavailable';

export interface ToolOutcome {
  tool_call_id: string;
  tool_name: string;
  success: boolean;
  result: string;
  exit_code?: number;
  truncated?: boolean;
  duration_ms?: number;
  /** The client did not answer before the call's deadline; the model got a tool error. */
  timed_out?: boolean;
}

export interface SessionEventPayloads {
  session_started: { session_id: string; workspace_id: string; model: string };
  user_message: { message_id: string; content: string; turn: number };
  text_delta: { message_id: string; content: string };
  thinking_delta: { message_id: string; content: string };
  activity: { state: ActivityState; detail: string };
  /** A client tool the model called: the client runs it and answers with a tool result. */
  tool_request: { tool_call_id: string; tool_name: string; parameters: Record<string, unknown>; timeout_ms: number };
  /** A builtin tool the worker runs itself. */
  tool_call: { tool_call_id: string; tool_name: string; arguments: string };
  tool_result: ToolOutcome;
  turn_complete: { message_id: string; usage: TokenUsage; stop_reason: string };
  session_error: { code: string; message: string; retryable: boolean };
  /**
   * The attempt running the turn ended unfinished — its worker died (`worker_lost`) or shut down past its drain
   * deadline (`worker_shutdown`) — and the turn resumes on another worker from its last boundary: deltas streamed
   * since that boundary are void, the model call runs again.
   */
  attempt_lost: { attempt: number; host_id: string; reason: AttemptLostReason; message: string };
  tools_registered: { source: string; tools: string[] };
  context_compacted: { tokens_before: number; tokens_after: number; messages_before: number; messages_after: number; summary: string };
  session_closed: { reason: string };
  /** A steer or follow-up sent while a turn runs waits in its queue (`position` 1 = next). */
  input_queued: { input_id: string; kind: InputKind; content: string; position: number };
  /** The queued (or immediate) input joined the transcript in turn `turn`. */
  input_delivered: { input_id: string; kind: InputKind; turn: number; content: string };
  /** The input was never delivered (an abort cleared the queues). */
  input_dropped: { input_id: string; kind: InputKind; reason: string };
  /**
   * A tool call waits for a decision (the session's or the workspace's policy said ask). The calls of one model
   * answer that ask are appended together, in the model's order: `index` (from 1) of `count`.
   */
  approval_requested: {
    approval_id: string; tool_call_id: string; tool_name: string; arguments: string; reason: string; timeout_secs: number;
    expires_at: string; index: number; count: number;
  };
  /** The decision, a timeout (`expired`, denied) or a cancel (`cancelled`: the turn or the session ended first). */
  approval_resolved: {
    approval_id: string; tool_call_id: string; tool_name: string; approved: boolean; status: ApprovalStatus; reason: string; decided_by: string;
    /** The amended arguments (a JSON object's text) the call runs with, if the approver gave any. */
    modifier?: string;
  };
}

/** Inputs that reach a session outside a plain user message. */
export type InputKind = 'steer' | 'follow_up';
export const STEERING_MODES = ['one-at-a-time', 'all'] as const;
export const INTERRUPT_MODES = ['immediate', 'wait'] as const;
export type SteeringMode = (typeof STEERING_MODES)[number];
export type InterruptMode = (typeof INTERRUPT_MODES)[number];

export type SessionEventType = keyof SessionEventPayloads;

export type SessionEvent = {
  [K in SessionEventType]: { seq: number; timestamp: string; event_type: K; payload: SessionEventPayloads[K] };
}[SessionEventType];

/** An event as the engine appends it (the log assigns seq and timestamp). */
export type SessionEventInput = {
  [K in SessionEventType]: { event_type: K; payload: SessionEventPayloads[K] };
}[SessionEventType];

export function isTerminalSessionEvent(eventType: string): boolean {
  return eventType === 'session_closed';
}

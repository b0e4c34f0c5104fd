import type { ApprovalStatus, InterruptMode, SessionStatus, SteeringMode, TokenUsage } from '@cadre/protocol';
import type { ApprovalRecord, ApprovalRule } from './approval-store.ts';

/** A tool the client runs (roz ToolSchema), as the session stores it. `source` groups RegisterTools sets. */
export interface ClientTool {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
  timeout_ms: number;
  source: string;
  category: string;
}

export interface NewSession {
  workspace_id: string;
  model: string;
  tools: ClientTool[];
  /** Seed transcript: history and project context, as chat messages. */
  transcript: object[];
  project_context: string[];
  system_context: string;
  max_context_tokens: number;
  /** The authenticated key a `/ws` conversation belongs to (edges that bind sessions to a key set it). */
  owner?: string;
  /** The session's own approval rules, checked before the workspace's. */
  approval_policy: ApprovalRule[];
  /** A denied call ends the turn (stop_reason `denied`) instead of feeding the model an error (kontekst runs). */
  stop_on_denial: boolean;
}

/** The approval a call waits for (or had), kept on the call in the calls hash (lua/decideSessionApproval-5.lua). */
export interface CallApproval {
  approval_id: string;
  status: ApprovalStatus;
  reason: string;
  timeout_secs: number;
  /** ms since the epoch */
  created_at: number;
  expires_at: number;
  decided_at?: number;
  /** The deciding key's name ('' for a timeout or a cancel), never the key. */
  decided_by?: string;
  decision_reason?: string;
  /** `session`: the approval also covers later calls of the same tool and arguments in the session. */
  scope?: 'once' | 'session';
  /** The amended arguments (a JSON object's text) the approver ran the call with, instead of the model's. */
  modifier?: string;
  /** The seq of the call's approval_requested event. */
  request_seq?: number;
}

/**
 * A tool call of the current turn that the turn waits on (the calls hash): a client tool's call, or any call
 * that needs an approval. `order` is the model's order.
 */
export interface ClientCall {
  tool_call_id: string;
  tool_name: string;
  /** The model's arguments, JSON text. */
  arguments: string;
  order: number;
  timeout_ms: number;
  deadline_ms: number;
  /** pending: waits for a client result or a decision · approved: a builtin call the worker may now run. */
  status: 'pending' | 'approved' | 'done' | 'cancelled';
  success?: boolean;
  result?: string;
  /** The seq of the call's tool_request event (set when it is appended). */
  request_seq?: number;
  /** A builtin call (the worker runs it) rather than a client's (absent: client). */
  builtin?: boolean;
  approval?: CallApproval;
  /** A client call's tool_request payload (JSON), appended when its approval is granted. */
  request_payload?: string;
}

/** The arguments a call runs with: the approver's modifier if there is one, else the model's. */
export function callArguments(call: ClientCall): string {
  return call.approval?.status === 'approved' && call.approval.modifier ? call.approval.modifier : call.arguments;
}

/** A session as users see it (GET /api/sessions/:id). */
export interface SessionRecord {
  session_id: string;
  workspace_id: string;
  status: SessionStatus;
  model: string;
  tools: ClientTool[];
  project_context: string[];
  system_context: string;
  max_context_tokens: number;
  turn: number;
  /** The current (or last) turn's message id. */
  message_id: string | null;
  pending_tool_calls: { tool_call_id: string; tool_name: string; deadline: string }[];
  created_at: string;
  updated_at: string;
  closed_reason: string | null;
  last_seq: number;
  /** The key that owns the session (a `/ws` conversation), or null when any key of the workspace may drive it. */
  owner: string | null;
  steering_mode: SteeringMode;
  follow_up_mode: SteeringMode;
  interrupt_mode: InterruptMode;
  /** Steering and follow-up messages waiting for the running turn, oldest first. */
  queued_steering: QueuedInput[];
  queued_follow_ups: QueuedInput[];
}

/** A queued steer or follow-up (lists `steer` / `followup`, see keys.ts). */
export interface QueuedInput {
  input_id: string;
  content: string;
  queued_at: string;
}

export interface InputModes {
  steering_mode?: SteeringMode;
  follow_up_mode?: SteeringMode;
  interrupt_mode?: InterruptMode;
}

/** What a turn's job reads at each step: the turn's settings, the transcript and the client calls. */
/** A turn that a cancel or a close ended: when it started (ms, Redis's clock; 0 if unknown), for its duration. */
export interface EndedTurn {
  started_at: number;
}

export interface TurnState {
  session_id: string;
  workspace_id: string;
  status: SessionStatus;
  model: string;
  message_id: string;
  turn: number;
  /** The client tools this turn offers: the message's snapshot, else the session's. */
  tools: ClientTool[];
  system_context: string;
  project_context: string[];
  max_context_tokens: number;
  turn_usage: TokenUsage;
  /** Transcript length when the turn began (messages before it are earlier turns). */
  turn_started_len: number;
  /** When the turn began (ms, Redis's clock; 0 for a turn begun before this was recorded). */
  turn_started_at: number;
  /**
   * Since when (ms, Redis's clock) every key of the session is sure to live the idle TTL: the turn's start, its last
   * park (which may keep them longer) or the last keepSessionAlive, whichever came last.
   */
  alive_from: number;
  /** The session's idle TTL (seconds, CADRE_SESSION_IDLE_TTL_SEC when it was created). */
  idle_ttl_sec: number;
  transcript: object[];
  calls: ClientCall[];
  approval_policy: ApprovalRule[];
  stop_on_denial: boolean;
  /** Steering messages waiting for the next model-turn boundary. */
  steers_queued: number;
}

/** A session approval as the approvals API shows it: a team worker's record's fields, plus session_id. */
export interface SessionApprovalView extends Omit<ApprovalRecord, 'order' | 'scope' | 'run_id'> {
  session_id: string;
  /** The call's place among its turn's calls (the model's order), from 0. */
  order: number;
  scope?: 'once' | 'session';
}

export function approvalView(workspaceId: string, sessionId: string, call: ClientCall): SessionApprovalView {
  const a = call.approval!;
  return {
    approval_id: a.approval_id, workspace_id: workspaceId, session_id: sessionId, task_id: '', worker_id: '', call_id: call.tool_call_id, order: call.order,
    tool_name: call.tool_name, arguments: call.arguments, reason: a.reason, timeout_secs: a.timeout_secs, status: a.status,
    created_at: a.created_at, expires_at: a.expires_at,
    ...(a.decided_at !== undefined && { decided_at: a.decided_at }),
    ...(a.decided_by !== undefined && { decided_by: a.decided_by }),
    ...(a.decision_reason !== undefined && { decision_reason: a.decision_reason }),
    ...(a.scope !== undefined && { scope: a.scope }),
    ...(a.modifier !== undefined && { modifier: a.modifier }),
  };
}

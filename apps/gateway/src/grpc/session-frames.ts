// Translates session log events into roz SessionResponse frames. The edge adds nothing else: every frame of a
// log event carries its seq; events roz has no message for (user_message, tool_result, tools_registered,
// session_closed) are not sent (the client's cursor still moves past them with the next frame).
import type { SessionEvent, SessionResponse, StartSession, ConversationMessage, SessionApprovalRule } from '@cadre/protocol';
import type { ApprovalRule } from '@cadre/store';
import type { HistoryInput, StartInput, ToolInput } from '@cadre/session';

export function toSessionResponse(sessionId: string, event: SessionEvent): SessionResponse | null {
  const frame = (response: SessionResponse['response']): SessionResponse => ({ response, seq: event.seq, sessionId });
  switch (event.event_type) {
    case 'session_started':
      return frame({ $case: 'sessionStarted', value: { sessionId: event.payload.session_id, model: event.payload.model, permissions: [] } });
    case 'text_delta':
      return frame({ $case: 'textDelta', value: { messageId: event.payload.message_id, content: event.payload.content } });
    case 'thinking_delta':
      return frame({ $case: 'thinkingDelta', value: { messageId: event.payload.message_id, content: event.payload.content } });
    case 'tool_request':
      return frame({ $case: 'toolRequest', value: toolRequest(event.payload) });
    case 'tool_call':
      // A builtin tool runs on the worker: the client sees its progress as activity.
      return frame({ $case: 'activityUpdate', value: { state: 'calling_tool', detail: event.payload.tool_name } });
    case 'activity':
      return frame({ $case: 'activityUpdate', value: { state: event.payload.state, detail: event.payload.detail } });
    case 'turn_complete': {
      const { usage } = event.payload;
      return frame({
        $case: 'turnComplete',
        value: {
          messageId: event.payload.message_id,
          usage: { inputTokens: usage.prompt_tokens ?? 0, outputTokens: usage.completion_tokens ?? 0, cacheReadTokens: 0, cacheCreationTokens: 0 },
          stopReason: event.payload.stop_reason,
        },
      });
    }
    case 'session_error':
      return frame({ $case: 'error', value: event.payload });
    case 'attempt_lost':
      return frame({ $case: 'error', value: { code: event.payload.reason ?? 'worker_lost', message: event.payload.message, retryable: true } });
    case 'context_compacted': {
      const p = event.payload;
      return frame({
        $case: 'contextCompacted',
        value: { level: 'summary', messagesBefore: p.messages_before, messagesAfter: p.messages_after, tokensBefore: p.tokens_before, tokensAfter: p.tokens_after, summary: p.summary },
      });
    }
    case 'user_message':
    case 'tool_result':
    case 'tools_registered':
    case 'session_closed':
    case 'input_queued':
    case 'input_delivered':
    case 'input_dropped':
    case 'approval_requested':
    case 'approval_resolved':
      // roz's permission protocol is the ActivityUpdate("waiting_approval") that follows each approval_requested
      // (its detail names the approval to decide); the records themselves have no roz frame.
      return null;
    default: {
      const never: never = event;
      return never;
    }
  }
}

export function toolRequest(p: { tool_call_id: string; tool_name: string; parameters: Record<string, unknown>; timeout_ms: number }) {
  return { toolCallId: p.tool_call_id, toolName: p.tool_name, parameters: p.parameters, timeoutMs: p.timeout_ms };
}

export function sessionError(code: string, message: string, retryable = false): SessionResponse {
  return { response: { $case: 'error', value: { code, message, retryable } }, seq: 0, sessionId: '' };
}

/** roz ToolSchema → the engine's tool input. */
export function toolInputs(tools: { name: string; description: string; parametersSchema?: { [key: string]: unknown } | undefined; timeoutMs: number; category: number }[]): ToolInput[] {
  return tools.map((t) => ({
    name: t.name,
    description: t.description,
    parameters: t.parametersSchema ?? {},
    timeout_ms: t.timeoutMs,
    category: ['', 'physical', 'pure'][t.category] ?? '',
  }));
}

/** roz StartSession → the engine's start input. */
export function startInput(start: StartSession): StartInput {
  return {
    workspace_id: start.environmentId,
    ...(start.model && { model: start.model }),
    tools: toolInputs(start.tools),
    history: start.history.map(historyMessage),
    project_context: start.projectContext,
    ...(start.maxContextTokens && { max_context_tokens: start.maxContextTokens }),
    ...(start.approvalPolicy && { approval_policy: { rules: start.approvalPolicy.rules.map(approvalRule) } }),
  };
}

/** Cadre's ApprovalRule (StartSession.approval_policy) → the HTTP API's rule; the engine checks it the same way. */
function approvalRule(rule: SessionApprovalRule): ApprovalRule {
  const when = Object.entries(rule.when);
  return {
    tool: rule.tool,
    // A match with no case set becomes {} and is refused by the engine (exactly one of equals, glob, regex).
    ...(when.length > 0 && { when: Object.fromEntries(when.map(([name, m]) => [name, m.match ? { [m.match.$case]: m.match.value } : {}])) as ApprovalRule['when'] }),
    action: rule.action as ApprovalRule['action'],
    ...(rule.timeoutSecs !== undefined && { timeout_secs: rule.timeoutSecs }),
    ...(rule.reason !== undefined && { reason: rule.reason }),
  };
}

/** A roz ConversationMessage as one transcript message: text parts joined, other parts rendered as text. */
function historyMessage(m: ConversationMessage): HistoryInput {
  const parts = m.parts.map((part) => {
    const p = part.part;
    switch (p?.$case) {
      case 'text':
        return p.value.text;
      case 'toolUse':
        return `[tool call ${p.value.name}(${JSON.stringify(p.value.input ?? {})})]`;
      case 'toolResult':
        return `[tool result ${p.value.name}: ${p.value.content}]`;
      case 'thinking':
        return '';
      case 'image':
        return `[image ${p.value.mediaType}]`;
      default:
        return '';
    }
  });
  return { role: m.role as HistoryInput['role'], content: parts.filter((t) => t !== '').join('\n') };
}

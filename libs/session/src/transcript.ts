import type { ChatCompletionMessageFunctionToolCall, ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import { callArguments, type ClientCall, type TurnState } from '@cadre/store';

/** A transcript entry: an OpenAI chat message as stored in the session's transcript list. */
export type TranscriptMessage = ChatCompletionMessageParam;

const BASE_INSTRUCTIONS = 'You are an interactive agent in a Cadre session. Answer the user; call tools when they help.';

/**
 * What the model is sent: the system block (instructions, project context, system context) and the
 * transcript. A tool call that never got its result (its turn was cancelled) gets an error result here, so the
 * conversation stays one the model API accepts.
 */
export function modelMessages(state: TurnState): ChatCompletionMessageParam[] {
  const system = [BASE_INSTRUCTIONS, ...state.project_context, state.system_context].filter((s) => s !== '').join('\n\n');
  const out: ChatCompletionMessageParam[] = [{ role: 'system', content: system }];
  let open: string[] = [];
  const closeOpen = (): void => {
    for (const id of open) out.push({ role: 'tool', tool_call_id: id, content: 'error: the turn ended before this tool call returned' });
    open = [];
  };
  for (const message of state.transcript as TranscriptMessage[]) {
    if (message.role === 'tool') {
      open = open.filter((id) => id !== message.tool_call_id);
      out.push(message);
      continue;
    }
    closeOpen();
    out.push(message);
    if (message.role === 'assistant' && message.tool_calls?.length) open = message.tool_calls.map((c) => c.id);
  }
  closeOpen();
  return out;
}

/** What the turn does next, read from the transcript (the last persisted boundary) and the client calls. */
export type TurnStep =
  | { kind: 'model' }
  | { kind: 'finish' }
  /** Builtin (or unknown) tool calls to run here, in the model's order. */
  | { kind: 'run_tools'; calls: ChatCompletionMessageFunctionToolCall[]; approved: ReadonlySet<string> }
  /** Client calls whose results arrived: they join the transcript. */
  | { kind: 'client_results'; calls: ClientCall[] }
  | { kind: 'park' };

export function nextStep(state: TurnState): TurnStep {
  const transcript = state.transcript as TranscriptMessage[];
  let lastAssistant = -1;
  for (let i = transcript.length - 1; i >= state.turn_started_len; i--) {
    if (transcript[i]!.role === 'assistant') {
      lastAssistant = i;
      break;
    }
  }
  if (lastAssistant === -1) return { kind: 'model' };
  // Steering delivered after the model's last answer (or after a stream a steer cut short): the model goes again.
  if (transcript.slice(lastAssistant + 1).some((m) => m.role === 'user')) return { kind: 'model' };
  const assistant = transcript[lastAssistant] as Extract<TranscriptMessage, { role: 'assistant' }>;
  const calls = (assistant.tool_calls ?? []) as ChatCompletionMessageFunctionToolCall[];
  if (calls.length === 0) return { kind: 'finish' };
  const answered = new Set(transcript.slice(lastAssistant + 1).map((m) => (m as { tool_call_id?: string }).tool_call_id));
  const open = calls.filter((c) => !answered.has(c.id));
  if (open.length === 0) return { kind: 'model' };
  const client = new Map(state.calls.map((c) => [c.tool_call_id, c]));
  // Runs here: a builtin call nothing waits on, or one whose approval was granted.
  const runnable = (id: string): boolean => !client.has(id) || client.get(id)!.status === 'approved';
  if (runnable(open[0]!.id)) {
    const run: ChatCompletionMessageFunctionToolCall[] = [];
    for (const call of open) {
      if (!runnable(call.id)) break;
      // An approved call runs with the arguments the approver let run (a modifier's, if given).
      const asked = client.get(call.id);
      run.push(asked ? { ...call, function: { ...call.function, arguments: callArguments(asked) } } : call);
    }
    return { kind: 'run_tools', calls: run, approved: new Set(run.filter((c) => client.has(c.id)).map((c) => c.id)) };
  }
  const settled: ClientCall[] = [];
  for (const call of open) {
    const c = client.get(call.id);
    if (!c || c.status === 'pending' || c.status === 'approved') break;
    settled.push(c);
  }
  return settled.length > 0 ? { kind: 'client_results', calls: settled } : { kind: 'park' };
}

/** The text the model sees for a client call's outcome. */
export function clientResultText(call: ClientCall): string {
  return call.success ? (call.result ?? '') : `error: ${call.result ?? 'the tool failed'}`;
}

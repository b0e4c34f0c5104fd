import type OpenAI from 'openai';
import type {
  ChatCompletionCreateParamsStreaming,
  ChatCompletionMessageFunctionToolCall,
} from 'openai/resources/chat/completions';
import type { TokenUsage } from '@cadre/protocol';
import { abortError } from './abort.ts';

export interface ModelTurn {
  content: string;
  /** Reasoning text, from servers that stream it (`reasoning_content` as vLLM and DeepSeek, or `reasoning`). */
  thinking: string;
  toolCalls: ChatCompletionMessageFunctionToolCall[];
  usage: TokenUsage;
  /** The first choice's finish_reason (`stop`, `tool_calls`, `length`, ...). */
  finishReason: string | null;
  /** The model that answered, as the server names it. */
  responseModel: string | null;
}

/**
 * One streaming chat completion, assembled from its deltas: content concatenated, tool calls keyed by their index
 * with arguments concatenated, usage from the final usage chunk. Throws an AbortError if `signal` ends the stream
 * (openai's iterator just stops on abort, which would otherwise look like a short answer), and an Error if the
 * stream ends without a finish_reason.
 */
export async function streamModelTurn(
  client: OpenAI,
  params: Omit<ChatCompletionCreateParamsStreaming, 'stream' | 'stream_options'>,
  signal: AbortSignal,
  onDelta?: (kind: 'text' | 'thinking', text: string) => void,
): Promise<ModelTurn> {
  const stream = await client.chat.completions.create(
    { ...params, stream: true, stream_options: { include_usage: true } },
    { signal },
  );
  let content = '';
  let thinking = '';
  let finished = false;
  let finishReason: string | null = null;
  let responseModel: string | null = null;
  const calls = new Map<number, ChatCompletionMessageFunctionToolCall>();
  const usage: TokenUsage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
  for await (const chunk of stream) {
    if (chunk.usage) {
      usage.prompt_tokens += chunk.usage.prompt_tokens;
      usage.completion_tokens += chunk.usage.completion_tokens;
      usage.total_tokens += chunk.usage.total_tokens;
    }
    // Only the first choice: the loop never asks for n > 1.
    const choice = chunk.choices.find((c) => c.index === 0);
    if (chunk.model) responseModel = chunk.model;
    if (choice?.finish_reason) {
      finished = true;
      finishReason = choice.finish_reason;
    }
    const delta = choice?.delta;
    if (!delta) continue;
    // Not in openai's types: reasoning servers add it to the delta.
    const reasoning = (delta as { reasoning_content?: unknown; reasoning?: unknown }).reasoning_content ?? (delta as { reasoning?: unknown }).reasoning;
    if (typeof reasoning === 'string' && reasoning !== '') {
      thinking += reasoning;
      onDelta?.('thinking', reasoning);
    }
    if (delta.content) {
      content += delta.content;
      onDelta?.('text', delta.content);
    }
    for (const part of delta.tool_calls ?? []) {
      let call = calls.get(part.index);
      if (!call) {
        call = { id: '', type: 'function', function: { name: '', arguments: '' } };
        calls.set(part.index, call);
      }
      if (part.id) call.id = part.id;
      if (part.function?.name) call.function.name = part.function.name;
      if (part.function?.arguments) call.function.arguments += part.function.arguments;
    }
  }
  if (signal.aborted) throw abortError(signal);
  // openai's iterator also just stops when the body ends early: without a finish_reason the answer (or a tool
  // call's arguments) may be cut off, so it is a model error rather than a short result.
  if (!finished) throw new Error('the model stream ended before a finish_reason (connection cut mid-answer?)');
  const toolCalls = [...calls.entries()]
    .sort(([a], [b]) => a - b)
    .map(([index, call]) => (call.id ? call : { ...call, id: `call_${index}` }));
  return { content, thinking, toolCalls, usage, finishReason, responseModel };
}

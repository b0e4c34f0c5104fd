// Wire shapes copied from OpenAI's chat completions API, so the `openai` client reads them unmodified.

import type { ScriptedReply } from './script.ts';

export type CompletionMeta = { id: string; created: number; model: string };

export type ErrorBody = { error: { message: string; type: string; param: null; code: string | null } };

export function errorBody(message: string, type: string, code: string | null = null): ErrorBody {
  return { error: { message, type, param: null, code } };
}

/** The error body OpenAI sends with a given status, as far as `type`/`code` go. */
export function errorForStatus(status: number, message: string): ErrorBody {
  if (status === 429) return errorBody(message, 'requests', 'rate_limit_exceeded');
  if (status >= 500) return errorBody(message, 'server_error');
  return errorBody(message, 'invalid_request_error');
}

export function completionBody(meta: CompletionMeta, reply: ScriptedReply): object {
  const message =
    reply.finishReason === 'tool_calls'
      ? {
          role: 'assistant',
          content: null,
          refusal: null,
          annotations: [],
          tool_calls: reply.toolCalls.map((call) => ({
            id: call.id,
            type: 'function',
            function: { name: call.name, arguments: call.arguments },
          })),
        }
      : { role: 'assistant', content: reply.content, refusal: null, annotations: [] };
  return {
    id: meta.id,
    object: 'chat.completion',
    created: meta.created,
    model: meta.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: reply.finishReason }],
    usage: reply.usage,
    system_fingerprint: null,
  };
}

/**
 * The chunks of a streamed reply, in order: deltas, a final chunk carrying finish_reason, then (when asked
 * with stream_options.include_usage) a chunk with empty choices and the usage. `[DONE]` is the caller's.
 */
export function completionChunks(meta: CompletionMeta, reply: ScriptedReply, includeUsage: boolean): object[] {
  const chunk = (choices: object[], usage?: ScriptedReply['usage']): object => ({
    id: meta.id,
    object: 'chat.completion.chunk',
    created: meta.created,
    model: meta.model,
    system_fingerprint: null,
    choices,
    ...(includeUsage ? { usage: usage ?? null } : {}),
  });
  const choice = (delta: object, finishReason: string | null = null): object => ({
    index: 0,
    delta,
    logprobs: null,
    finish_reason: finishReason,
  });
  const chunks = replyDeltas(reply).map((delta) => chunk([choice(delta)]));
  chunks.push(chunk([choice({}, reply.finishReason)]));
  if (includeUsage) chunks.push(chunk([], reply.usage));
  return chunks;
}

function replyDeltas(reply: ScriptedReply): object[] {
  // Reasoning first, as reasoning servers (vLLM, DeepSeek) stream it: `reasoning_content` deltas.
  const thinking = wordGroups(reply.thinking, 3).map((reasoning_content) => ({ reasoning_content }));
  if (reply.finishReason === 'stop') {
    return [
      { role: 'assistant', content: '', refusal: null },
      ...thinking,
      ...wordGroups(reply.content, 3).map((content) => ({ content })),
    ];
  }
  // OpenAI streams each call as a header (index, id, type, name, empty arguments) then argument fragments;
  // the role rides on the first header.
  const deltas: object[] = [...thinking];
  reply.toolCalls.forEach((call, index) => {
    const header = { index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } };
    deltas.push(index === 0 ? { role: 'assistant', content: null, refusal: null, tool_calls: [header] } : { tool_calls: [header] });
    for (const fragment of fragments(call.arguments, 3)) {
      deltas.push({ tool_calls: [{ index, function: { arguments: fragment } }] });
    }
  });
  return deltas;
}

/** Splits text into groups of `size` words, keeping every whitespace character, so the groups join back exactly. */
export function wordGroups(text: string, size: number): string[] {
  const words = text.match(/\S+\s*|\s+/g) ?? [];
  const groups: string[] = [];
  for (let i = 0; i < words.length; i += size) groups.push(words.slice(i, i + size).join(''));
  return groups;
}

/** Splits text into `count` fragments by code point (fewer only when the text is shorter than `count`). */
export function fragments(text: string, count: number): string[] {
  const points = Array.from(text);
  const size = Math.max(1, Math.ceil(points.length / count));
  const parts: string[] = [];
  for (let i = 0; i < points.length; i += size) parts.push(points.slice(i, i + size).join(''));
  return parts;
}

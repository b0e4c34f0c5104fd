// The scripted model's answer to a chat request: a pure function of the request, so tests can predict it.
// Rules (first match wins) are documented in ../README.md.

import { contentText, isRecord, type ChatMessage, type Directives } from './directives.ts';

export const DEFAULT_SPAWN_ROLES: readonly string[] = ['researcher', 'critic'];
const SPAWN_TOOL = 'spawn_worker';
const QUOTE_MAX = 80;
const TOOL_RESULT_MAX = 60;

export type ScriptedToolCall = { id: string; name: string; arguments: string };

export type Usage = { prompt_tokens: number; completion_tokens: number; total_tokens: number };

export type ScriptedReply = (
  | { finishReason: 'stop'; content: string; toolCalls: []; usage: Usage }
  | { finishReason: 'tool_calls'; content: null; toolCalls: ScriptedToolCall[]; usage: Usage }
) & { thinking: string };

export function planReply(messages: readonly ChatMessage[], tools: readonly unknown[], directives: Directives): ScriptedReply {
  const toolResults = messages.filter((m) => m.role === 'tool');
  const assistantTurn = messages.filter((m) => m.role === 'assistant').length;
  const quote = firstLine(lastUserText(messages), QUOTE_MAX);
  const promptTokens = tokens(messages.reduce((sum, m) => sum + contentText(m.content).length, 0));

  const toolCallsReply = (calls: Omit<ScriptedToolCall, 'id'>[]): ScriptedReply => {
    const toolCalls = calls.map((call, i) => ({ id: `call_${assistantTurn}_${i}`, ...call }));
    const chars = toolCalls.reduce((sum, c) => sum + c.name.length + c.arguments.length, 0);
    return { finishReason: 'tool_calls', content: null, toolCalls, usage: usage(promptTokens, tokens(chars)), thinking: directives.think };
  };

  // Rule 1: a coordinator offered spawn_worker fans out once, before any tool has answered.
  if (offersTool(tools, SPAWN_TOOL) && toolResults.length === 0) {
    const roles = directives.spawnRoles ?? DEFAULT_SPAWN_ROLES;
    return toolCallsReply(
      roles.map((role) => ({
        name: SPAWN_TOOL,
        arguments: JSON.stringify({ role, instructions: `${role}: work on: ${quote}` }),
      })),
    );
  }

  // Rule 2: walk the call= directives, one per response, counting tool results as progress.
  const nextCall = directives.calls[toolResults.length];
  if (nextCall) return toolCallsReply(directives.parallel ? directives.calls.slice(toolResults.length) : [nextCall]);

  // Rule 3: the final answer.
  let content = `Scripted answer to "${quote}"`;
  if (toolResults.length > 0) {
    const summaries = toolResults.map((m) => truncate(contentText(m.content), TOOL_RESULT_MAX));
    content += ` using ${toolResults.length} tool result(s): ${summaries.join('; ')}`;
  }
  const images = lastUserImages(messages);
  if (images.length > 0) content += ` seeing ${images.length} image(s): ${images.join('; ')}`;
  if (directives.words > 0) content += `. ${longText(directives.words)}`;
  return { finishReason: 'stop', content, toolCalls: [], usage: usage(promptTokens, tokens(content.length)), thinking: directives.think };
}

const FILLER = ['the', 'scripted', 'model', 'keeps', 'talking', 'so', 'that', 'a', 'long', 'answer', 'fills', 'context'];

/** `n` words of filler, numbered every twelfth word so a reader can tell where a stream stopped. */
function longText(n: number): string {
  const words: string[] = [];
  for (let i = 0; i < n; i++) words.push(i % FILLER.length === 0 ? `w${i}` : FILLER[i % FILLER.length]!);
  return words.join(' ');
}

function offersTool(tools: readonly unknown[], name: string): boolean {
  return tools.some((tool) => isRecord(tool) && isRecord(tool.function) && tool.function.name === name);
}

function lastUserText(messages: readonly ChatMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i];
    if (message?.role === 'user') return contentText(message.content);
  }
  return '';
}

/** The last user message's `image_url` parts as `<media type> <bytes> bytes` (data URLs), or `<url>` otherwise. */
function lastUserImages(messages: readonly ChatMessage[]): string[] {
  const message = [...messages].reverse().find((m) => m.role === 'user');
  if (!message || !Array.isArray(message.content)) return [];
  return message.content.flatMap((part) => {
    if (!isRecord(part) || part.type !== 'image_url' || !isRecord(part.image_url) || typeof part.image_url.url !== 'string') return [];
    const data = /^data:([^;,]+);base64,([A-Za-z0-9+/=]*)$/.exec(part.image_url.url);
    return [data ? `${data[1]} ${Buffer.from(data[2]!, 'base64').length} bytes` : truncate(part.image_url.url, TOOL_RESULT_MAX)];
  });
}

function firstLine(text: string, max: number): string {
  return truncate((text.split(/\r?\n/, 1)[0] ?? '').trim(), max);
}

/** Cuts by code points so a surrogate pair is never split. */
function truncate(text: string, max: number): string {
  const points = Array.from(text);
  return points.length <= max ? text : points.slice(0, max).join('');
}

function tokens(chars: number): number {
  return Math.max(1, Math.ceil(chars / 4));
}

function usage(prompt: number, completion: number): Usage {
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

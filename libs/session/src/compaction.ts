import type OpenAI from 'openai';
import { streamModelTurn, untilAborted } from '@cadre/agent';
import type { TurnState } from '@cadre/store';
import { modelMessages, type TranscriptMessage } from './transcript.ts';

/**
 * What one image costs the model, whatever its size: the most OpenAI's tile formula gives (high detail: the image
 * fit in 2048×2048, its short side scaled to 768 px, 170 tokens per 512-px tile plus 85; at most 2×4 tiles =
 * 1,445). An upper bound, so the budget check never counts an image as less than a model would — and never by its
 * base64 length (a 1 MB image is ~1.4 M characters: ~350,000 "tokens" by characters / 4).
 */
export const IMAGE_TOKENS = 1445;

/**
 * A rough token count, the same measure for the budget check and the figures reported: text by characters / 4,
 * each image (an `image_url` content part) as IMAGE_TOKENS.
 */
export function estimateTokens(messages: readonly unknown[]): number {
  let images = 0;
  const text = JSON.stringify(messages, (_key, value: unknown) => {
    if (isImagePart(value)) {
      images++;
      return undefined;
    }
    return value;
  });
  return Math.ceil(text.length / 4) + images * IMAGE_TOKENS;
}

function isImagePart(value: unknown): boolean {
  return typeof value === 'object' && value !== null && (value as { type?: unknown }).type === 'image_url';
}

/**
 * What to compact when the next model call would exceed the session's max_context_tokens: every earlier turn
 * (whole turns, so no tool call is separated from its result), if there are at least two messages to fold.
 */
export function compactionPlan(state: TurnState): { count: number; tokensBefore: number } | null {
  const tokensBefore = estimateTokens(modelMessages(state));
  if (state.max_context_tokens <= 0 || tokensBefore <= state.max_context_tokens) return null;
  const count = state.turn_started_len;
  return count >= 2 ? { count, tokensBefore } : null;
}

/** How the summary message that replaces compacted turns begins: it is always the transcript's first message. */
export const SUMMARY_HEADING = '[Summary of the earlier conversation]';

/** Whether earlier turns of this transcript were compacted away (with what the model said in them). */
export function wasCompacted(transcript: readonly unknown[]): boolean {
  const first = transcript[0] as TranscriptMessage | undefined;
  return first?.role === 'user' && typeof first.content === 'string' && first.content.startsWith(SUMMARY_HEADING);
}

/** Summarises the oldest messages through the session's model; the summary replaces them in the transcript. */
export async function summarise(model: OpenAI, state: TurnState, count: number, signal: AbortSignal): Promise<string> {
  const older = (state.transcript.slice(0, count) as TranscriptMessage[])
    .map((m) => `${m.role}: ${contentOf(m)}`)
    .join('\n')
    // Earlier messages are quoted, not obeyed: scripted-model directives in them must not steer the summary.
    .replaceAll('[[', '[ [');
  const turn = await untilAborted(
    streamModelTurn(model, {
      model: state.model,
      messages: [
        { role: 'system', content: 'You compress conversations. Keep facts, decisions, names, numbers and open questions; drop pleasantries.' },
        { role: 'user', content: `Summarise this conversation so far in a few sentences.\n\n${older}` },
      ],
    }, signal),
    signal,
  );
  return turn.content;
}

function contentOf(m: TranscriptMessage): string {
  if (typeof m.content === 'string') return m.content;
  if (m.role === 'assistant' && m.tool_calls?.length) return `[called ${m.tool_calls.map((c) => ('function' in c ? c.function.name : 'a tool')).join(', ')}]`;
  return Array.isArray(m.content) ? m.content.map((p) => ('text' in p ? p.text : '')).join(' ') : '';
}

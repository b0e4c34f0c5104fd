import type OpenAI from 'openai';
import { streamModelTurn, untilAborted } from '@cadre/agent';
import type { TurnState } from '@cadre/store';
import { modelMessages, type TranscriptMessage } from './transcript.ts';

/** A rough token count (characters / 4), the same measure for the budget check and the figures reported. */
export function estimateTokens(messages: readonly unknown[]): number {
  return Math.ceil(JSON.stringify(messages).length / 4);
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

import { describe, expect, it } from 'vitest';
import { reissuedCallId } from './turn-runner.ts';

// What OpenAI's, Anthropic's and Bedrock's APIs accept back as a tool call's id in the transcript.
const ACCEPTED = /^[A-Za-z0-9_-]{1,40}$/;

describe('reissuedCallId', () => {
  it('keeps a short model id whole and adds the call\'s place in the session', () => {
    expect(reissuedCallId('call_0_0', 7, 1, 2)).toBe('call_0_0_t7_1_2');
  });

  it('shortens a long model id to stay within 40 accepted characters, the suffix kept whole', () => {
    const anthropic = 'toolu_01A09q90qw90lq917835lq9abcdefghij';
    const id = reissuedCallId(anthropic, 123456, 12, 3);
    expect(id).toMatch(ACCEPTED);
    expect(id.endsWith('_t123456_12_3')).toBe(true);
    expect(id.startsWith('toolu_01')).toBe(true);
  });

  it('names different calls differently even when the model ids are the same', () => {
    const ids = [reissuedCallId('0', 2, 0, 0), reissuedCallId('0', 2, 0, 1), reissuedCallId('0', 2, 1, 0), reissuedCallId('0', 3, 0, 0)];
    expect(new Set(ids).size).toBe(4);
    for (const id of ids) expect(id).toMatch(ACCEPTED);
  });
});

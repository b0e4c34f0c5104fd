import { describe, expect, it } from 'vitest';
import { IMAGE_TOKENS, estimateTokens } from './compaction.ts';

describe('estimateTokens', () => {
  it('counts an image part as IMAGE_TOKENS, whatever the length of its data URL', () => {
    const text = [{ role: 'user', content: [{ type: 'text', text: 'What is in the picture?' }] }];
    const withImage = (bytes: number) => [{
      role: 'user',
      content: [{ type: 'text', text: 'What is in the picture?' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${Buffer.alloc(bytes).toString('base64')}` } }],
    }];
    const small = estimateTokens(withImage(100));
    expect(estimateTokens(withImage(1024 * 1024))).toBe(small);
    expect(small - estimateTokens(text)).toBeGreaterThanOrEqual(IMAGE_TOKENS);
    expect(small - estimateTokens(text)).toBeLessThan(IMAGE_TOKENS + 10);
  });
});

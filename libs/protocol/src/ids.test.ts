import { describe, expect, it } from 'vitest';
import { canonicalUuid } from './ids.ts';

const canonical = '67e55044-10b1-426f-9247-bb680e5fe0c8';

describe('canonicalUuid', () => {
  // The spellings Rust's Uuid::parse_str accepts (uuid 1.x, which roz uses), and the cases it refuses.
  it.each([
    canonical,
    '67E55044-10B1-426F-9247-BB680E5FE0C8',
    '67e5504410b1426f9247bb680e5fe0c8',
    '67E5504410B1426F9247BB680E5FE0C8',
    '{67e55044-10b1-426f-9247-bb680e5fe0c8}',
    '{67E55044-10b1-426F-9247-bb680e5fe0c8}',
    'urn:uuid:67e55044-10b1-426f-9247-bb680e5fe0c8',
    'urn:uuid:67E55044-10B1-426F-9247-BB680E5FE0C8',
  ])('reads %s as the canonical id', (spelling) => {
    expect(canonicalUuid(spelling)).toBe(canonical);
  });

  it.each([
    '',
    'not-a-uuid',
    '67e55044-10b1-426f-9247-bb680e5fe0c',
    '67e55044-10b1-426f-9247-bb680e5fe0c8a',
    '67e5504410b1426f9247bb680e5fe0cg',
    '{67e5504410b1426f9247bb680e5fe0c8}',
    'urn:uuid:67e5504410b1426f9247bb680e5fe0c8',
    'URN:UUID:67e55044-10b1-426f-9247-bb680e5fe0c8',
    '{67e55044-10b1-426f-9247-bb680e5fe0c8',
    ' 67e55044-10b1-426f-9247-bb680e5fe0c8',
    '67e55044-10b1426f-9247-bb680e5fe0c8-',
  ])('refuses %j', (spelling) => {
    expect(canonicalUuid(spelling)).toBeNull();
  });
});

import { expect, it } from 'vitest';
import { RecentMap } from './recent-map.ts';

it('keeps at most its limit, dropping the least recently used (a read counts as a use)', () => {
  const map = new RecentMap<string, string>(2);
  map.set('a', 'ws-a');
  map.set('b', 'ws-b');
  expect(map.get('a')).toBe('ws-a'); // now b is the least recently used
  map.set('c', 'ws-c');
  expect(map.get('b')).toBeUndefined();
  expect(map.get('a')).toBe('ws-a');
  expect(map.get('c')).toBe('ws-c');
});

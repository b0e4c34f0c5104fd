import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadOrCreateDevApiKey } from './dev-api-key.ts';

describe('loadOrCreateDevApiKey', () => {
  const dirs: string[] = [];
  const fresh = (): string => {
    const dir = mkdtempSync(join(tmpdir(), 'cadre-key-'));
    dirs.push(dir);
    return join(dir, 'nested', 'dev-api-key');
  };
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it('creates a key readable only by its owner, then reuses it', () => {
    const file = fresh();
    const first = loadOrCreateDevApiKey(file);
    expect(first.created).toBe(true);
    expect(first.key).toMatch(/^cadre_dev_[A-Za-z0-9_-]{32}$/);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(readFileSync(file, 'utf8').trim()).toBe(first.key);

    expect(loadOrCreateDevApiKey(file)).toEqual({ key: first.key, created: false });
  });

  it('replaces a damaged key file', () => {
    const file = fresh();
    loadOrCreateDevApiKey(file);
    writeFileSync(file, 'not a key!\n');
    const next = loadOrCreateDevApiKey(file);
    expect(next.created).toBe(true);
    expect(next.key).toMatch(/^cadre_dev_/);
  });
});

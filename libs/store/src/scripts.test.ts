// How the store's Functions library is built from its Lua files: what it refuses to build (no Redis needed).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { buildLibrary } from './scripts.ts';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A directory of Lua as the store's: `includes` by name, and one script that includes `scriptIncludes`. */
function luaDir(includes: Record<string, string>, scriptIncludes: string[]): URL {
  const dir = mkdtempSync(join(tmpdir(), 'cadre-scripts-'));
  dirs.push(dir);
  mkdirSync(join(dir, 'includes'));
  for (const [name, lua] of Object.entries(includes)) writeFileSync(join(dir, 'includes', `${name}.lua`), lua);
  writeFileSync(join(dir, 'touch-1.lua'), [...scriptIncludes.map((name) => `--@include ${name}`), "return redis.call('SET', KEYS[1], '1')"].join('\n'));
  return pathToFileURL(`${dir}/`);
}

describe('building the store library', () => {
  it('builds an include whose per-call state its enter sets, and calls the enter at each function entry', () => {
    const state = 'local fooKey, barKey  -- per call\nlocal function enterFooState(KEYS)\n  fooKey, barKey = KEYS[1], KEYS[2]\nend\n';
    const library = buildLibrary(luaDir({ 'foo-state': state }, ['foo-state']));
    expect(library.code).toMatch(/^enterFooState\(KEYS\)$/m);
    expect([...library.functions.keys()]).toEqual(['touch']);
  });

  it('refuses an include cycle, naming it', () => {
    const dir = luaDir({ a: '--@include b\nlocal function fromA() end\n', b: '--@include a\nlocal function fromB() end\n' }, ['a']);
    expect(() => buildLibrary(dir)).toThrow('includes/a.lua: an include cycle (a includes b includes a)');
  });

  it('refuses per-call state without its enter (here misspelt), which would keep the previous call\'s', () => {
    const state = 'local fooKey\nlocal function enterFoostate(KEYS)\n  fooKey = KEYS[1]\nend\n';
    expect(() => buildLibrary(luaDir({ 'foo-state': state }, ['foo-state']))).toThrow(
      "includes/foo-state.lua: fooKey is declared without a value (per-call state), so the include needs `local function enterFooState(KEYS)` to set it at each call's entry",
    );
  });

  it('refuses an enter that leaves some of its per-call state unset', () => {
    const state = 'local fooKey, barKey\nlocal collected -- what a call collects\nlocal function enterFooState(KEYS)\n  fooKey = KEYS[1]\n  collected = {}\nend\n';
    expect(() => buildLibrary(luaDir({ 'foo-state': state }, ['foo-state']))).toThrow(
      "includes/foo-state.lua: enterFooState does not set barKey (declared without a value: per-call state, set at each call's entry)",
    );
  });
});

import { readFileSync, readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { startTestRedis } from '@cadre/testing';
import { luaErrorTable, scriptError, SCRIPT_ERRORS, unknownErrorNames, type ScriptErrorCode } from './errors.ts';

const LUA_DIR = new URL('./lua/', import.meta.url);
const scripts = readdirSync(LUA_DIR)
  .filter((f) => f.endsWith('.lua'))
  .map((file) => ({ file, lua: readFileSync(new URL(file, LUA_DIR), 'utf8') }));

describe('the one table of script errors', () => {
  it('gives each code one meaning, and decodes every code to its own StoreError', () => {
    const codes = Object.values(SCRIPT_ERRORS).map((e) => e.code);
    expect(new Set(codes).size).toBe(codes.length);
    for (const [name, { code }] of Object.entries(SCRIPT_ERRORS)) {
      expect(code).toBeLessThan(0);
      expect(scriptError(code, 'op')).toMatchObject({ code: name, message: `op: ${SCRIPT_ERRORS[name as ScriptErrorCode].text}` });
    }
    expect(scriptError(-999, 'op')).toMatchObject({ code: 'unexpected_script_result', message: 'op: unexpected script result -999' });
  });

  it('is what every script answers with: no bare negative codes, only ERR names the table has, and the include', () => {
    for (const { file, lua } of scripts) {
      const body = lua.slice(lua.indexOf(']]'));
      expect(body, file).not.toMatch(/return\s*\{?\s*-\d/);
      const used = [...lua.matchAll(/\bERR\.(\w+)/g)].map((m) => m[1]!);
      for (const name of used) expect(Object.keys(SCRIPT_ERRORS), `${file}: ERR.${name}`).toContain(name);
      if (used.length > 0) expect(lua, file).toMatch(/^--@include errors$/m);
    }
  });

  it('reaches Redis as ERR.<code> with the same numbers from a Functions library, and a name it lacks is refused before any call', async () => {
    const server = await startTestRedis();
    const redis = server.connect();
    const library = `errors_test_${process.pid}`;
    try {
      // Loaded as the store's library is: the table at its top level, read by a function.
      const code = `#!lua name=${library}\n${luaErrorTable()}redis.register_function('${library}_code', function(KEYS, ARGV) return ERR[ARGV[1]] end)`;
      await redis.ping(); // a Cluster client knows its masters once connected
      const nodes = 'nodes' in redis ? redis.nodes('master') : [redis];
      await Promise.all(nodes.map((node) => node.call('FUNCTION', 'LOAD', code)));
      for (const [name, { code: number }] of Object.entries(SCRIPT_ERRORS)) {
        expect(await redis.fcall(`${library}_code`, 1, `errors-test-${name}`, name)).toBe(number);
      }
      // A library cannot raise on it when the call reads it (no setmetatable while Redis loads a library): the
      // loader refuses a source that names it (scripts.ts), so no script answers nil where it means to refuse.
      expect(unknownErrorNames('if x then return ERR.lease_lost end return ERR.no_such_code')).toEqual(['no_such_code']);
      await Promise.all(nodes.map((node) => node.call('FUNCTION', 'DELETE', library)));
    } finally {
      redis.disconnect();
      await server.stop();
    }
  });
});

import { describe, expect, it } from 'vitest';
import { builtinTools, resolveTools, UnknownToolError } from './builtin.ts';

const ctx = () => ({ signal: new AbortController().signal, callId: 'call_1' });

describe('builtin tools', () => {
  it('calculate evaluates its expression argument', async () => {
    await expect(builtinTools.calculate!.run({ expression: '6*7' }, ctx())).resolves.toBe('42');
    await expect(builtinTools.calculate!.run({}, ctx())).rejects.toThrow('"expression" must be a string');
  });

  it('current_time returns an ISO timestamp', async () => {
    const text = await builtinTools.current_time!.run({}, ctx());
    expect(new Date(text).toISOString()).toBe(text);
  });

  it('wait sleeps, validates ms and rejects with an AbortError on abort', async () => {
    await expect(builtinTools.wait!.run({ ms: 5 }, ctx())).resolves.toBe('waited 5 ms');
    await expect(builtinTools.wait!.run({ ms: 60_001 }, ctx())).rejects.toThrow('"ms" must be a number');
    const controller = new AbortController();
    const waiting = builtinTools.wait!.run({ ms: 60_000 }, { signal: controller.signal, callId: 'call_1' });
    setTimeout(() => controller.abort(), 20);
    await expect(waiting).rejects.toMatchObject({ name: 'AbortError' });
  });
});

describe('resolveTools', () => {
  it('returns the named tools in order, once each', () => {
    expect(resolveTools(['wait', 'calculate', 'wait']).map((tool) => tool.name)).toEqual(['wait', 'calculate']);
  });

  it('names every unknown tool in an UnknownToolError', () => {
    const err = (() => {
      try {
        resolveTools(['calculate', 'shell', 'toString']);
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(UnknownToolError);
    expect(err).toMatchObject({ code: 'unknown_tool', names: ['shell', 'toString'] });
  });
});

import { describe, expect, it } from 'vitest';
import { createLogPrettifier } from './pretty.ts';

describe('createLogPrettifier', () => {
  it('turns a pino JSON line into one readable line and leaves other lines alone', () => {
    const pretty = createLogPrettifier({ colour: false });
    const line = JSON.stringify({ level: 30, time: Date.parse('2026-01-02T03:04:05.678Z'), pid: 1, hostname: 'h', name: 'gateway', taskId: 't-1', msg: 'task created' });
    const out = pretty(line);
    expect(out).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: task created \{"taskId":"t-1"\}$/);
    expect(out).not.toContain('\n');
    expect(pretty('plain text')).toBe('plain text');
    expect(pretty('{not json')).toBe('{not json');
  });

  it('colours levels when asked', () => {
    const out = createLogPrettifier({ colour: true })(JSON.stringify({ level: 50, time: 0, msg: 'boom' }));
    expect(out).toContain('\u001b[');
    expect(out).toContain('boom');
  });
});

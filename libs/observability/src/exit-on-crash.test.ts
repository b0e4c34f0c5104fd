// exitOnCrash in a process of its own: an unhandled rejection ends the process with one scrubbed "crashed" line,
// except ioredis's "Connection is closed." of a command it sent for itself and never awaited — what a Cluster's
// ASK redirect leaves behind when the redirect's connection closes (redis/ioredis#1140). That one is a warning.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { describe, expect, it } from 'vitest';

const LIB = new URL('./index.ts', import.meta.url).href;
const IOREDIS = import.meta.resolve('ioredis');

/**
 * Runs a process under exitOnCrash that leaves an ioredis command unawaited, as ioredis's Cluster does with ASKING,
 * and closes its connection before the command could be sent (nothing listens on port 1: the command waits in the
 * offline queue, and disconnect() rejects it "Connection is closed."). Then, with `thenFail`, an unhandled
 * rejection of its own. Returns its exit code and log lines.
 */
async function run(thenFail: boolean): Promise<{ code: number | null; lines: { level: number; msg: string; err?: { message: string } }[] }> {
  const code = `
    import { Redis } from ${JSON.stringify(IOREDIS)};
    import { createLogger, exitOnCrash } from ${JSON.stringify(LIB)};
    exitOnCrash(createLogger({ name: 'crash-test' }));
    const redis = new Redis({ port: 1, host: '127.0.0.1', retryStrategy: () => null, lazyConnect: false });
    redis.on('error', () => undefined);
    redis.asking(); // unawaited, as ioredis/built/cluster/index.js sends it
    redis.disconnect();
    await new Promise((resolve) => setTimeout(resolve, 100));
    if (${thenFail}) Promise.reject(new Error('a bug of ours'));
    await new Promise((resolve) => setTimeout(resolve, 100));
    process.stderr.write('still running\\n');
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += String(chunk)));
  const [exitCode] = (await once(child, 'exit')) as [number | null];
  return { code: exitCode, lines: out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l)) };
}

describe('exitOnCrash', () => {
  it("logs ioredis's unhandled 'Connection is closed.' as a warning and goes on", async () => {
    const { code, lines } = await run(false);
    expect(code).toBe(0);
    expect(lines).toEqual([expect.objectContaining({ level: 40, err: expect.objectContaining({ message: 'Connection is closed.' }) })]);
  });

  it('still ends the process on any other unhandled rejection', async () => {
    const { code, lines } = await run(true);
    expect(code).toBe(1);
    expect(lines.at(-1)).toMatchObject({ level: 60, msg: 'crashed', err: { message: 'a bug of ours' } });
  });
});

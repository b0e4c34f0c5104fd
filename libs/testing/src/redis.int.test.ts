// The testcontainers path's failure is no longer silent: with a Docker endpoint that has no engine behind it,
// startTestRedis says why once per process and still hands out working private Redis servers.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { describe, expect, it } from 'vitest';

const LIB = new URL('./index.ts', import.meta.url).href;

describe('startTestRedis without a working container engine', () => {
  it('falls back to redis-server, saying why once per process', async () => {
    const code = `
      import { Redis } from 'ioredis';
      import { startTestRedis } from ${JSON.stringify(LIB)};
      for (let i = 0; i < 2; i++) {
        const server = await startTestRedis();
        const client = new Redis(server.url);
        process.stdout.write(await client.ping() + '\\n');
        client.disconnect();
        await server.stop();
      }
    `;
    // Port 9 (discard) is closed here: the Docker endpoint answers nothing.
    const child = spawn(process.execPath, ['--input-type=module', '-e', code], {
      env: { ...process.env, DOCKER_HOST: 'tcp://127.0.0.1:9' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const [exitCode] = await once(child, 'exit');
    expect(exitCode).toBe(0);
    expect(out).toBe('PONG\nPONG\n');
    const warnings = err.split('\n').filter((line) => line.startsWith('@cadre/testing:'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/testcontainers Redis did not start via tcp:\/\/127\.0\.0\.1:9 \(.+\); using a redis-server child instead/);
  });
});

import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isProcessAlive } from '@cadre/testing';
import { runShell, shellTool } from './shell.ts';

let dir: string;
const never = new AbortController().signal;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'vm-agent-shell-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});


async function waitUntilDead(pid: number, withinMs: number): Promise<boolean> {
  const deadline = Date.now() + withinMs;
  while (Date.now() < deadline) {
    if (!isProcessAlive(pid)) return true;
    await sleep(20);
  }
  return !isProcessAlive(pid);
}

async function pidFrom(file: string): Promise<number> {
  for (let i = 0; i < 200 && !existsSync(file); i++) await sleep(10);
  await sleep(20);
  return Number((await readFile(file, 'utf8')).trim());
}

describe('shell tool', () => {
  it('returns the exit code, stdout and stderr, in the run directory with a scrubbed environment', async () => {
    process.env.VM_AGENT_TEST_SECRET = 'leak';
    try {
      const r = await runShell('pwd; echo "secret=${VM_AGENT_TEST_SECRET:-none}"; echo oops >&2; exit 3', { cwd: dir, timeoutMs: 5_000 }, never);
      expect(r).toMatchObject({ exitCode: 3, timedOut: false, stderr: 'oops\n' });
      expect(r.stdout.split('\n')).toEqual([expect.stringMatching(/vm-agent-shell-/), 'secret=none', '']);
    } finally {
      delete process.env.VM_AGENT_TEST_SECRET;
    }
    const text = await shellTool({ cwd: dir, timeoutMs: 5_000 }).run({ command: 'echo hi > out.txt && cat out.txt' }, { signal: never, callId: 'call_1' });
    expect(text).toBe('exit code: 0\nstdout:\nhi\nstderr:\n(empty)');
    expect(await readFile(join(dir, 'out.txt'), 'utf8')).toBe('hi\n');
  });

  it('truncates long output', async () => {
    const text = await shellTool({ cwd: dir, timeoutMs: 5_000, maxOutputBytes: 10 }).run({ command: 'head -c 100 /dev/zero | tr "\\0" x' }, { signal: never, callId: 'call_1' });
    expect(text).toBe('exit code: 0\nstdout:\nxxxxxxxxxx\n[stdout truncated: 100 bytes in all]\nstderr:\n(empty)');
  });

  it('kills the whole process group on timeout', async () => {
    const run = runShell('sleep 30 & echo $! > sleep.pid; wait', { cwd: dir, timeoutMs: 300 }, never);
    const pid = await pidFrom(join(dir, 'sleep.pid'));
    const r = await run;
    expect(r.timedOut).toBe(true);
    expect(await waitUntilDead(pid, 1_000)).toBe(true);
    const text = await shellTool({ cwd: dir, timeoutMs: 200 }).run({ command: 'sleep 30' }, { signal: never, callId: 'call_1' });
    expect(text).toMatch(/^timed out after 200 ms; the command was killed/);
  });

  it('rejects with an AbortError and kills the command within a second of an abort', async () => {
    const controller = new AbortController();
    const run = runShell('sleep 30 & echo $! > sleep.pid; wait', { cwd: dir, timeoutMs: 60_000 }, controller.signal);
    const pid = await pidFrom(join(dir, 'sleep.pid'));
    expect(isProcessAlive(pid)).toBe(true);
    controller.abort();
    await expect(run).rejects.toMatchObject({ name: 'AbortError' });
    expect(await waitUntilDead(pid, 1_000)).toBe(true);
  });

  it('does not let background processes outlive the command', async () => {
    const r = await runShell('sleep 30 >/dev/null 2>&1 & echo $!', { cwd: dir, timeoutMs: 5_000 }, never);
    expect(r.exitCode).toBe(0);
    expect(await waitUntilDead(Number(r.stdout.trim()), 1_000)).toBe(true);
  });

  it('refuses a missing command', async () => {
    await expect(shellTool({ cwd: dir, timeoutMs: 1_000 }).run({}, { signal: never, callId: 'call_1' })).rejects.toThrow('"command" must be a non-empty string');
  });
});

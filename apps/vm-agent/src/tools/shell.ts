import { spawn } from 'node:child_process';
import type { AgentTool } from '@cadre/agent';
import { abortError } from './abort.ts';

export interface ShellOptions {
  /** The run's working directory. */
  cwd: string;
  timeoutMs: number;
  /** Per stream; the rest is counted, not kept. */
  maxOutputBytes?: number;
  /** The command's whole environment. Default: PATH, LANG and HOME=cwd, so the agent's keys never reach it. */
  env?: Record<string, string>;
}

export interface ShellResult {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  stdout: string;
  stderr: string;
  /** Bytes written in all; more than kept means the text was truncated. */
  stdoutBytes: number;
  stderrBytes: number;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
}

/** Keeps the first `max` bytes of a stream and counts the rest. */
class Capped {
  private readonly chunks: Buffer[] = [];
  private kept = 0;
  total = 0;
  private readonly max: number;
  constructor(max: number) {
    this.max = max;
  }
  push(chunk: Buffer): void {
    this.total += chunk.length;
    if (this.kept >= this.max) return;
    const part = chunk.subarray(0, this.max - this.kept);
    this.chunks.push(part);
    this.kept += part.length;
  }
  get truncated(): boolean {
    return this.total > this.kept;
  }
  text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }
}

/**
 * Runs `/bin/sh -c command` in its own process group. On timeout or abort the whole group is SIGKILLed (so a
 * `sleep` under the shell dies too); an abort rejects at once with an AbortError. When the shell exits, whatever
 * it left running in its group is killed as well: a command's processes do not outlive it.
 */
export function runShell(command: string, opts: ShellOptions, signal: AbortSignal): Promise<ShellResult> {
  if (signal.aborted) return Promise.reject(abortError(signal));
  const max = opts.maxOutputBytes ?? 16 * 1024;
  const env = opts.env ?? { PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin', LANG: process.env.LANG ?? 'C.UTF-8', HOME: opts.cwd };
  const child = spawn('/bin/sh', ['-c', command], { cwd: opts.cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  const stdout = new Capped(max);
  const stderr = new Capped(max);
  child.stdout.on('data', (c: Buffer) => stdout.push(c));
  child.stderr.on('data', (c: Buffer) => stderr.push(c));

  const killGroup = (): void => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      // ESRCH: the group is already gone.
    }
  };

  return new Promise<ShellResult>((resolve, reject) => {
    let settled = false;
    let timedOut = false;
    let exit: { code: number | null; signal: string | null } | null = null;
    let lingering: ReturnType<typeof setTimeout> | undefined;
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup();
    }, opts.timeoutMs);

    const finish = (settle: () => void): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(lingering);
      signal.removeEventListener('abort', onAbort);
      killGroup();
      settle();
    };
    const done = (): void =>
      finish(() =>
        resolve({
          exitCode: exit?.code ?? null,
          signal: exit?.signal ?? null,
          timedOut,
          stdout: stdout.text(),
          stderr: stderr.text(),
          stdoutBytes: stdout.total,
          stderrBytes: stderr.total,
          stdoutTruncated: stdout.truncated,
          stderrTruncated: stderr.truncated,
        }),
      );
    const onAbort = (): void => finish(() => reject(abortError(signal)));

    signal.addEventListener('abort', onAbort, { once: true });
    child.once('error', (err) => finish(() => reject(err)));
    child.once('exit', (code, sig) => {
      exit = { code, signal: sig };
      // A background process may hold the pipes open; give them a moment, then stop waiting.
      lingering = setTimeout(() => {
        child.stdout.destroy();
        child.stderr.destroy();
        done();
      }, 100);
    });
    child.once('close', (code, sig) => {
      exit ??= { code, signal: sig };
      done();
    });
  });
}

export function formatShellResult(r: ShellResult, timeoutMs: number): string {
  const status = r.timedOut
    ? `timed out after ${timeoutMs} ms; the command was killed`
    : r.exitCode !== null
      ? `exit code: ${r.exitCode}`
      : `killed by ${r.signal ?? 'a signal'}`;
  const section = (name: string, text: string, truncated: boolean, total: number): string =>
    `${name}:\n${text === '' ? '(empty)' : text.replace(/\n$/, '')}${truncated ? `\n[${name} truncated: ${total} bytes in all]` : ''}`;
  return `${status}\n${section('stdout', r.stdout, r.stdoutTruncated, r.stdoutBytes)}\n${section('stderr', r.stderr, r.stderrTruncated, r.stderrBytes)}`;
}

export function shellTool(opts: ShellOptions): AgentTool {
  return {
    name: 'shell',
    description:
      `Run a shell command (/bin/sh -c) in the run's working directory. Killed after ${opts.timeoutMs} ms; ` +
      'background processes are killed when the command returns. Returns the exit code, stdout and stderr.',
    parameters: {
      type: 'object',
      properties: { command: { type: 'string', minLength: 1 } },
      required: ['command'],
      additionalProperties: false,
    },
    async run(args, ctx) {
      const command = (args as { command?: unknown } | null)?.command;
      if (typeof command !== 'string' || command.trim() === '') throw new Error('"command" must be a non-empty string');
      return formatShellResult(await runShell(command, opts, ctx.signal), opts.timeoutMs);
    },
  };
}

import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';

export interface ChildSpec {
  /** Shown before each of its output lines: `gateway`, `worker-1`. */
  name: string;
  /** The .ts entry point, relative to `cwd`; run with this process's own Node (type stripping). */
  entry: string;
  /** Flags for its node, before the entry point (e.g. V8's heap limits). */
  nodeArgs?: readonly string[];
  cwd: string;
  env: Record<string, string | undefined>;
  /** Width the name is padded to, so the `|` columns line up. */
  nameWidth?: number;
  stdout?: Writable;
  stderr?: Writable;
  /** Rewrites each output line before it is copied (pretty logs on a terminal). */
  formatLine?: (line: string) => string;
}

export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** A service process of the stack whose output lines are copied to ours, prefixed with its name. */
export class ServiceProcess {
  readonly name: string;
  /** Resolves once the process has exited and its output has been copied (or after the exit if it lingers). */
  readonly exited: Promise<ChildExit>;
  private readonly child: ChildProcess;
  private exit: ChildExit | undefined;

  constructor(spec: ChildSpec) {
    this.name = spec.name;
    const prefix = `${spec.name.padEnd(spec.nameWidth ?? 0)} | `;
    // Own process group: a Ctrl-C in the terminal reaches only the stack, which then stops the children in order
    // (they drain while Redis is still up) instead of every process at once.
    this.child = spawn(process.execPath, [...(spec.nodeArgs ?? []), spec.entry], {
      cwd: spec.cwd,
      env: spec.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const copied = [
      copyLines(this.child.stdout!, spec.stdout ?? process.stdout, prefix, spec.formatLine),
      copyLines(this.child.stderr!, spec.stderr ?? process.stderr, prefix, spec.formatLine),
    ];
    this.exited = new Promise((resolve) => {
      const finish = (exit: ChildExit): void => {
        this.exit ??= exit;
        // A grandchild could hold the pipes open; do not wait for the output forever.
        const timer = setTimeout(() => resolve(this.exit!), 2_000);
        void Promise.all(copied).then(() => {
          clearTimeout(timer);
          resolve(this.exit!);
        });
      };
      this.child.once('exit', (code, signal) => finish({ code, signal }));
      // Spawning itself failed (no 'exit' follows): report it as an exit with a code.
      this.child.once('error', (err) => {
        (spec.stderr ?? process.stderr).write(`${prefix}could not start: ${err.message}\n`);
        finish({ code: 127, signal: null });
      });
    });
    ALIVE.add(this);
    void this.exited.then(() => ALIVE.delete(this));
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  hasExited(): boolean {
    return this.exit !== undefined || this.child.exitCode !== null || this.child.signalCode !== null;
  }

  signal(signal: NodeJS.Signals): void {
    if (this.hasExited()) return;
    try {
      this.child.kill(signal);
    } catch {
      // Already gone between the check and the kill.
    }
  }
}

function copyLines(from: Readable, to: Writable, prefix: string, format: (line: string) => string = (l) => l): Promise<void> {
  const lines = createInterface({ input: from, crlfDelay: Infinity });
  lines.on('line', (line) => {
    if (!to.writableEnded && !to.destroyed) to.write(`${prefix}${format(line)}\n`);
  });
  return new Promise((resolve) => lines.once('close', resolve));
}

/**
 * SIGTERM to every child still running (they drain), then SIGKILL to whichever has not exited after `graceMs`.
 * Resolves once all have exited.
 */
export async function stopAll(children: readonly ServiceProcess[], graceMs: number, onKill: (c: ServiceProcess) => void): Promise<void> {
  for (const child of children) child.signal('SIGTERM');
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'deadline'>((resolve) => {
    timer = setTimeout(() => resolve('deadline'), graceMs);
  });
  const all = Promise.all(children.map((c) => c.exited));
  const outcome = await Promise.race([all, deadline]);
  clearTimeout(timer);
  if (outcome === 'deadline') {
    for (const child of children) {
      if (child.hasExited()) continue;
      onKill(child);
      child.signal('SIGKILL');
    }
    await all;
  }
}

export function killAll(children: readonly ServiceProcess[]): void {
  for (const child of children) child.signal('SIGKILL');
}

// Children live in their own process groups, so nothing else stops them if this process ends abruptly
// (an uncaught error, process.exit): SIGKILL whatever is left. (SIGKILL of the stack itself cannot be caught.)
const ALIVE = new Set<ServiceProcess>();
process.once('exit', () => {
  for (const child of ALIVE) child.signal('SIGKILL');
});

// Processes a bench starts: the system under test (gateway, worker) and every load generator, each an OS process
// of its own, so no load generator shares an event loop with what it measures. Children speak a line protocol:
// `@@bench {json}` on stdout or stderr to the parent, one JSON command per line on stdin from it.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** USER_HZ: 100 on every Linux this runs on. */
const CLOCK_TICKS = 100;
export const REPO = fileURLToPath(new URL('../../', import.meta.url));
const MARK = '@@bench ';

/** CPU seconds a process has used so far in user space and in the kernel, from /proc/<pid>/stat. */
export function cpuTimesOf(pid: number): { user: number; system: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may hold spaces): utime and stime are the 14th and 15th overall.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { user: Number(rest[11]) / CLOCK_TICKS, system: Number(rest[12]) / CLOCK_TICKS };
}

/** CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat. */
export function cpuSecondsOf(pid: number): number {
  const { user, system } = cpuTimesOf(pid);
  return user + system;
}

/** VmRSS and VmHWM (peak) in MB, from /proc. */
export function rssOf(pid: number): { rssMb: number; peakMb: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rssMb: kb('VmRSS') / 1024, peakMb: kb('VmHWM') / 1024 };
}

export interface Message {
  type: string;
  [k: string]: unknown;
}

export interface NodeChild {
  pid: number;
  process: ChildProcess;
  cpuSeconds(): number;
  rss(): { rssMb: number; peakMb: number };
  /** The next `@@bench` message of this type not yet taken (waits for it). */
  next<T extends Message = Message>(type: string, timeoutMs?: number): Promise<T>;
  send(command: object): void;
  /** Every line it printed that was not a message, trimmed to the last 4 KB. */
  output(): string;
  /** Calls `onLine` for each line it prints (messages included). */
  onLine(f: (line: string) => void): void;
  exited: Promise<number | null>;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export interface SpawnOptions {
  args?: string[];
  env?: Record<string, string>;
  /** Before the script: e.g. --cpu-prof, --import a probe. */
  nodeArgs?: string[];
}

/** `script` relative to the repository root, run by the Node that runs this bench. */
export function spawnNode(script: string, opts: SpawnOptions = {}): NodeChild {
  // process.execPath: the Node 24 that runs this bench (npm exec puts it first on PATH), not the system node.
  const child = spawn(process.execPath, [...(opts.nodeArgs ?? []), script, ...(opts.args ?? [])], {
    cwd: REPO,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...opts.env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const pid = child.pid!;
  let output = '';
  const queued: Message[] = [];
  const waiting: { type: string; resolve: (m: Message) => void }[] = [];
  const listeners: ((line: string) => void)[] = [];
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const take = (m: Message): void => {
    const w = waiting.findIndex((x) => x.type === m.type);
    if (w >= 0) waiting.splice(w, 1)[0]!.resolve(m);
    else queued.push(m);
  };
  const reader = (): ((c: Buffer) => void) => {
    let partial = '';
    return (c) => {
      const lines = (partial + c.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        for (const f of listeners) f(line);
        const at = line.indexOf(MARK);
        if (at >= 0) take(JSON.parse(line.slice(at + MARK.length)) as Message);
        else output = `${output}${line}\n`.slice(-4000);
      }
    };
  };
  child.stdout!.on('data', reader());
  child.stderr!.on('data', reader());
  child.stdin!.on('error', () => undefined); // a child that exited before reading its commands
  return {
    pid,
    process: child,
    cpuSeconds: () => cpuSecondsOf(pid),
    rss: () => rssOf(pid),
    next<T extends Message>(type: string, timeoutMs = 60_000): Promise<T> {
      const q = queued.findIndex((m) => m.type === type);
      if (q >= 0) return Promise.resolve(queued.splice(q, 1)[0] as T);
      return new Promise<T>((resolve, reject) => {
        const entry = { type, resolve: (m: Message) => { clearTimeout(timer); resolve(m as T); } };
        const timer = setTimeout(() => {
          waiting.splice(waiting.indexOf(entry), 1);
          reject(new Error(`${script}: no "${type}" message within ${timeoutMs} ms; its output:\n${output}`));
        }, timeoutMs);
        waiting.push(entry);
        void exited.then((code) => {
          if (waiting.includes(entry)) {
            clearTimeout(timer);
            waiting.splice(waiting.indexOf(entry), 1);
            reject(new Error(`${script} exited (${code}) before sending "${type}"; its output:\n${output}`));
          }
        });
      });
    },
    send: (command) => void child.stdin!.write(`${JSON.stringify(command)}\n`),
    output: () => output,
    onLine: (f) => void listeners.push(f),
    exited,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

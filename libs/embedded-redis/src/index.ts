// A private redis-server child for a fresh clone (DESIGN "Embedded defaults"): used only when REDIS_URL is unset.
// No config file: everything is passed as arguments, and the server listens on 127.0.0.1 only.
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isProcessRunning } from '@cadre/lifecycle';

export interface EmbeddedRedisLogger {
  info(o: object, m: string): void;
  warn(o: object, m: string): void;
}

export interface EmbeddedRedisOptions {
  /** Where redis keeps its files; created if missing. Default: a fresh temp dir, removed on stop() unless `persist`. */
  dataDir?: string;
  /** Default: a free port on 127.0.0.1. */
  port?: number;
  /** Append-only file with fsync on every write, so data survives a crash and `restart()`. */
  persist?: boolean;
  logger?: EmbeddedRedisLogger;
  /** Executable name or path. */
  binary?: string;
  /** How long to wait for the first PONG. */
  startTimeoutMs?: number;
  /** More redis-server arguments (e.g. `--cluster-enabled yes` for a test cluster's node). */
  extraArgs?: string[];
  /** A config file, passed first (Sentinel mode needs one it can rewrite). */
  configFile?: string;
}

export interface EmbeddedRedis {
  readonly url: string;
  readonly port: number;
  /** Of the current (or last) server process; changes after restart(). */
  readonly pid: number;
  readonly dataDir: string;
  /** Graceful shutdown; SIGKILL if the server has not exited after 5 s. Idempotent. */
  stop(): Promise<void>;
  /** Sends a signal without waiting (SIGKILL by default): for crash tests. */
  kill(signal?: NodeJS.Signals): void;
  /** Starts the server again on the same port and data dir (stopping it first if it is still running). */
  restart(): Promise<void>;
}

const HOST = '127.0.0.1';
const STOP_GRACE_MS = 5_000;
const PORT_RACE_RETRIES = 5;
const OUTPUT_TAIL_CHARS = 4_000;

export const REDIS_MISSING_HELP =
  'Install one (Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew install redis`), ' +
  'or set REDIS_URL to an existing Redis.';

export class RedisServerNotFoundError extends Error {
  readonly code = 'REDIS_SERVER_NOT_FOUND';
  constructor(binary: string) {
    super(`\`${binary}\` was not found on PATH, and REDIS_URL is not set. ${REDIS_MISSING_HELP}`);
    this.name = 'RedisServerNotFoundError';
  }
}

/** A port that was free a moment ago: bind port 0, read the port, close. Racy by nature; callers retry. */
export function findFreePort(host: string = HOST): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error('could not read the bound port'));
        return;
      }
      server.close(() => resolve(address.port));
    });
  });
}

// Children still alive when the parent exits get SIGKILL. One listener for all instances (no MaxListeners warning).
const liveChildren = new Set<ChildProcess>();
const tempDirs = new Set<string>();
let exitHookInstalled = false;
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const c of liveChildren) c.kill('SIGKILL');
    for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
  });
}
function track(child: ChildProcess): void {
  installExitHook();
  liveChildren.add(child);
  child.once('exit', () => liveChildren.delete(child));
}

class OutputTail {
  private text = '';
  append(chunk: Buffer): void {
    this.text = (this.text + chunk.toString('utf8')).slice(-OUTPUT_TAIL_CHARS);
  }
  toString(): string {
    return this.text.trimEnd();
  }
}

interface Running {
  child: ChildProcess;
  exited: Promise<void>;
  hasExited: () => boolean;
  output: OutputTail;
}

function serverArgs(port: number, dataDir: string, persist: boolean, extraArgs: string[]): string[] {
  const args = ['--port', String(port), '--bind', HOST, '--protected-mode', 'yes', '--daemonize', 'no', '--dir', dataDir];
  if (persist) args.push('--appendonly', 'yes', '--appendfsync', 'always');
  else args.push('--save', '', '--appendonly', 'no');
  return [...args, ...extraArgs];
}

function launch(binary: string, args: string[]): Promise<Running> {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: false });
    const output = new OutputTail();
    child.stdout.on('data', (c: Buffer) => output.append(c));
    child.stderr.on('data', (c: Buffer) => output.append(c));
    let exited = false;
    const exitedPromise = new Promise<void>((done) => child.once('exit', () => { exited = true; done(); }));
    child.once('error', (err: NodeJS.ErrnoException) => {
      reject(err.code === 'ENOENT' ? new RedisServerNotFoundError(binary) : err);
    });
    child.once('spawn', () => {
      track(child);
      resolve({ child, exited: exitedPromise, hasExited: () => exited, output });
    });
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

type Reply = string | Error | null | Reply[];

/** One RESP reply parsed from `text` at `at`, with where the next one starts; undefined while it is incomplete. */
function parseReply(text: string, at: number): [Reply, number] | undefined {
  const lineEnd = text.indexOf('\r\n', at);
  if (lineEnd < 0) return undefined;
  const line = text.slice(at + 1, lineEnd);
  const next = lineEnd + 2;
  switch (text[at]) {
    case '+':
    case ':':
      return [line, next];
    case '-':
      return [new Error(line), next];
    case '$': {
      const length = Number(line);
      if (length < 0) return [null, next];
      return text.length < next + length + 2 ? undefined : [text.slice(next, next + length), next + length + 2];
    }
    case '*': {
      const items: Reply[] = [];
      let position = next;
      for (let i = 0; i < Number(line); i++) {
        const item = parseReply(text, position);
        if (item === undefined) return undefined;
        items.push(item[0]);
        position = item[1];
      }
      return [items, position];
    }
    default:
      return [new Error(`unexpected reply ${JSON.stringify(text.slice(at, at + 20))}`), text.length];
  }
}

/** Sends `commands` over a raw socket to 127.0.0.1:port; their replies, or undefined if the connection fails first. */
function exchange(port: number, commands: readonly (readonly string[])[], timeoutMs: number): Promise<Reply[] | undefined> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: HOST, port });
    let text = '';
    const finish = (replies: Reply[] | undefined): void => {
      socket.destroy();
      resolve(replies);
    };
    socket.setTimeout(timeoutMs, () => finish(undefined));
    socket.once('error', () => finish(undefined));
    socket.once('close', () => finish(undefined));
    socket.once('connect', () =>
      socket.write(commands.map((args) => `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`).join('')),
    );
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      const replies: Reply[] = [];
      for (let at = 0; replies.length < commands.length; ) {
        const reply = parseReply(text, at);
        if (reply === undefined) return;
        replies.push(reply[0]);
        at = reply[1];
      }
      finish(replies);
    });
  });
}

const processIdIn = (info: Reply | undefined): number | undefined =>
  typeof info === 'string' ? Number(/^process_id:(\d+)\r?$/m.exec(info)?.[1] ?? Number.NaN) : undefined;

/**
 * PING plus INFO: true when the server is done loading (+PONG, not -LOADING) and it is our child, not some other
 * server that already held the port (INFO's process_id must match).
 */
async function answersAs(port: number, pid: number, timeoutMs: number): Promise<boolean> {
  const replies = await exchange(port, [['PING'], ['INFO', 'server']], timeoutMs);
  return replies?.[0] === 'PONG' && processIdIn(replies[1]) === pid;
}

/**
 * Stops a redis-server that an earlier process started on `dataDir` and left running (it was killed with -9), so
 * that two servers never write one data dir. Only a server that answers on `port` as process `pid` with `dataDir`
 * as its dir is stopped (never a process that reused the pid): SHUTDOWN, so it persists what it has (SIGKILL if it
 * is still there after 5 s). 'stopped', or 'not-running' when no such server is there; throws if it will not stop.
 */
export async function stopLeftoverRedis(leftover: { pid: number; port: number; dataDir: string }): Promise<'stopped' | 'not-running'> {
  if (!isProcessRunning(leftover.pid)) return 'not-running';
  const replies = await exchange(leftover.port, [['INFO', 'server'], ['CONFIG', 'GET', 'dir']], 2_000);
  const dir = replies?.[1];
  const sameDir = (a: string, b: string): boolean => {
    try {
      return realpathSync(a) === realpathSync(b);
    } catch {
      return false;
    }
  };
  if (replies === undefined || processIdIn(replies[0]) !== leftover.pid) return 'not-running';
  if (!Array.isArray(dir) || typeof dir[1] !== 'string' || !sameDir(dir[1], leftover.dataDir)) return 'not-running';
  // SHUTDOWN closes the connection without a reply when it works.
  await exchange(leftover.port, [['SHUTDOWN']], STOP_GRACE_MS);
  const gone = async (withinMs: number): Promise<boolean> => {
    const deadline = Date.now() + withinMs;
    while (isProcessRunning(leftover.pid) && Date.now() < deadline) await sleep(20);
    return !isProcessRunning(leftover.pid);
  };
  if (await gone(STOP_GRACE_MS)) return 'stopped';
  process.kill(leftover.pid, 'SIGKILL');
  if (await gone(STOP_GRACE_MS)) return 'stopped';
  throw new Error(`the redis-server (pid ${leftover.pid}) left running on ${leftover.dataDir} did not stop, even on SIGKILL`);
}

async function waitForPong(run: Running, port: number, timeoutMs: number): Promise<'ready' | 'exited' | 'timeout'> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (run.hasExited()) return 'exited';
    if (await answersAs(port, run.child.pid ?? -1, 500)) return 'ready';
    await sleep(50);
  }
  return 'timeout';
}

async function terminate(run: Running, signal: NodeJS.Signals): Promise<void> {
  if (run.hasExited()) return;
  run.child.kill(signal);
  let timer: NodeJS.Timeout | undefined;
  const escalate = new Promise<void>((r) => {
    timer = setTimeout(() => {
      run.child.kill('SIGKILL');
      r();
    }, STOP_GRACE_MS);
  });
  await Promise.race([run.exited, escalate]);
  clearTimeout(timer);
  await run.exited;
}

export async function startEmbeddedRedis(opts: EmbeddedRedisOptions = {}): Promise<EmbeddedRedis> {
  const binary = opts.binary ?? 'redis-server';
  const persist = opts.persist ?? false;
  const startTimeoutMs = opts.startTimeoutMs ?? 10_000;
  const logger = opts.logger;
  const ownsDataDir = opts.dataDir === undefined;
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'cadre-redis-'));
  // A temp dir nobody can find again is removed on stop() or exit, unless `persist` asked for the data to stay.
  const removeDataDir = (): void => {
    rmSync(dataDir, { recursive: true, force: true });
    tempDirs.delete(dataDir);
  };

  let port = opts.port ?? 0;
  let run: Running | undefined;
  let lastPid = -1;
  let stopping = false;
  let killedOnPurpose = false;

  // Starts redis on `port`; if the port was ours to choose and another process took it first, picks another.
  const boot = async (mayPickPort: boolean): Promise<void> => {
    mkdirSync(dataDir, { recursive: true });
    if (ownsDataDir && !persist) {
      installExitHook();
      tempDirs.add(dataDir);
    }
    for (let attempt = 1; ; attempt++) {
      if (mayPickPort) port = await findFreePort(HOST);
      const current = await launch(binary, [...(opts.configFile ? [opts.configFile] : []), ...serverArgs(port, dataDir, persist, opts.extraArgs ?? [])]);
      const outcome = await waitForPong(current, port, startTimeoutMs);
      if (outcome === 'ready') {
        run = current;
        lastPid = current.child.pid ?? -1;
        stopping = false;
        killedOnPurpose = false;
        void current.exited.then(() => {
          if (run !== current || stopping || killedOnPurpose) return;
          logger?.warn({ port, pid: current.child.pid, output: current.output.toString() }, 'embedded redis exited');
        });
        logger?.info({ port, pid: current.child.pid, dataDir, persist }, 'embedded redis started');
        return;
      }
      await terminate(current, 'SIGKILL');
      const tail = current.output.toString();
      if (mayPickPort && attempt < PORT_RACE_RETRIES && /address already in use/i.test(tail)) continue;
      const why = outcome === 'timeout' ? `did not answer PING within ${startTimeoutMs} ms` : 'exited during start-up';
      throw new Error(`${binary} on port ${port} ${why}. Last output:\n${tail || '(none)'}`);
    }
  };

  try {
    await boot(opts.port === undefined);
  } catch (err) {
    if (ownsDataDir) removeDataDir();
    throw err;
  }

  const stopServer = async (): Promise<void> => {
    if (run === undefined) return;
    stopping = true;
    // SIGTERM is redis's own graceful shutdown (same as SHUTDOWN; with --save '' it writes no snapshot).
    await terminate(run, 'SIGTERM');
  };

  return {
    get url() {
      return `redis://${HOST}:${port}`;
    },
    get port() {
      return port;
    },
    get pid() {
      return lastPid;
    },
    dataDir,
    async stop() {
      await stopServer();
      run = undefined;
      if (ownsDataDir && !persist) removeDataDir();
    },
    kill(signal: NodeJS.Signals = 'SIGKILL') {
      if (run === undefined || run.hasExited()) return;
      killedOnPurpose = true;
      run.child.kill(signal);
    },
    async restart() {
      if (run !== undefined) {
        if (!run.hasExited()) await stopServer();
        else await run.exited;
      }
      run = undefined;
      await boot(false);
    },
  };
}

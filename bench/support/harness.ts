// What every bench needs: a private redis-server, the real gateway as a child process, gRPC watchers, and the
// task store to write a task's log directly. Loopback only; everything started here is stopped here.
import { randomUUID } from 'node:crypto';
import { appendFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { pino } from 'pino';
import { startEmbeddedRedis, findFreePort, type EmbeddedRedis } from '@cadre/embedded-redis';
import { AgentServiceClient, type TeamEventProto } from '@cadre/protocol';
import { KeyBuilder, TaskStore, connectRedis, workerIdFor } from '@cadre/store';
import { sleep, until } from './latency.ts';
import { spawnNode, type Message, type NodeChild } from './procs.ts';
import { CHILD_NODE_ARGS } from '../../apps/stack/src/child-env.ts';
import { GATEWAY_FLAGS_EXPERIMENT } from './report.ts';

export const BENCH_API_KEY = 'bench-key-all-workspaces';
export { REPO } from './procs.ts';
export const silentLogger = pino({ level: process.env.BENCH_LOG_LEVEL ?? 'silent' });

/**
 * The bench's own redis-server. With BENCH_REDIS_UNIX=1 it also listens on a Unix socket, and `gatewayUrl` (what a
 * bench gives the gateway as REDIS_URL) is `unix:///…` instead of its TCP URL: an experiment (the fixed-JSON route
 * has no Redis, so the comparison is a gateway on a co-located Redis over a socket against a route with none).
 */
export async function startPrivateRedis(): Promise<EmbeddedRedis & { gatewayUrl: string; unixSocket: boolean }> {
  if (process.env.BENCH_REDIS_UNIX !== '1') {
    const redis = await startEmbeddedRedis();
    return Object.assign(redis, { unixSocket: false, gatewayUrl: redis.url });
  }
  const dir = mkdtempSync(join(tmpdir(), 'bench-sock-'));
  const socket = join(dir, 'redis.sock');
  const redis = await startEmbeddedRedis({ extraArgs: ['--unixsocket', socket, '--unixsocketperm', '700'] });
  const stop = redis.stop.bind(redis);
  return Object.assign(redis, {
    unixSocket: true,
    gatewayUrl: `unix://${socket}`,
    stop: async () => {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  });
}

/** The scripted model (libs/scripted-model) as a process of its own, and the OPENAI_BASE_URL it printed. */
export async function spawnScriptedModel(): Promise<{ child: NodeChild; url: string }> {
  const child = spawnNode('libs/scripted-model/src/main.ts', { env: { PORT: '0' } });
  const url = await new Promise<string>((resolve) => child.onLine((line) => {
    const m = /OPENAI_BASE_URL=(\S+)/.exec(line);
    if (m) resolve(m[1]!);
  }));
  return { child, url };
}

/** The store a bench writes through, on a connection of its own. */
export function benchStore(redisUrl: string, prefix: string): TaskStore {
  return new TaskStore({ redis: connectRedis(redisUrl, 'bench-store'), keys: new KeyBuilder(prefix) });
}

export const newPrefix = (): string => `bench${randomUUID().slice(0, 6)}`;

/** A live task with one named worker whose attempt the bench holds, so it may append that worker's events. */
export interface LiveTask {
  taskId: string;
  workerId: string;
  lease: string;
  /** Seq of the last event appended so far (task_queued, worker_started). */
  lastSeq: number;
}

export async function createLiveTask(store: TaskStore, goal = 'bench'): Promise<LiveTask> {
  const { task } = await store.createTask({
    workspace_id: 'bench',
    goal,
    team: { lead: { instructions: 'lead' }, workers: [{ role: 'bench', instructions: 'append events', tools: [] }], max_workers: 1 },
    metadata: {},
  });
  const workerId = workerIdFor('bench', 1);
  const lease = randomUUID();
  await store.claimWorker(task.task_id, workerId, lease, 'bench-host');
  const fresh = await store.getTask(task.task_id);
  return { taskId: task.task_id, workerId, lease, lastSeq: fresh!.last_seq };
}

/** Ends the task (worker completed, then task_completed), which ends every WatchTeam stream on it. */
export async function finishLiveTask(store: TaskStore, t: LiveTask): Promise<void> {
  const usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
  await store.finishWorker(t.taskId, t.workerId, t.lease, { outcome: 'completed', result: 'done', usage }, { status: 'completed', result: 'done', usage });
}

// ---------------------------------------------------------------------------------------------------------
// The gateway as a real OS process (apps/gateway/src/main.ts), so its RSS and its CPU are its own.

export interface GatewayProcess {
  pid: number;
  port: number;
  url: string;
  target: string;
  child: NodeChild;
  /** Samples without labels (beyond the default `app`) from its /metrics (e.g. cadre_watchers, cadre_fanout_tail_reads_total). */
  metrics(): Promise<Record<string, number>>;
  /** VmRSS and VmHWM (peak) in MB, from /proc. */
  rss(): { rssMb: number; peakMb: number };
  /** CPU seconds (user + system) the process has used so far, from /proc/<pid>/stat. */
  cpuSeconds(): number;
  /** Event-loop delay, utilisation and GC since the previous call (bench/support/probe.ts, loaded into it). */
  probe(): Promise<ProbeReport>;
  /** The last few KB of its stdout and stderr. */
  output(): string;
  /** Full GCs seen so far, when started with --trace-gc: heap in use after each (live) and heap committed. */
  fullGcs(): { liveMb: number; committedMb: number }[];
  stop(): Promise<void>;
}

export interface ProbeReport {
  resolution_ms: number;
  loop_delay_ms: { p50: number; p99: number; max: number; mean: number };
  loop_utilization: number;
  gc: { count: number; total_ms: number; max_ms: number; major: number; major_ms: number };
  /** MB allocated on V8's heap in the window; only from a process started with BENCH_ALLOC=1. */
  allocated_mb?: number;
}

export const PROBE = fileURLToPath(new URL('./probe.ts', import.meta.url));

/**
 * With BENCH_CPU_PROF=<dir>, a process started with these args writes a V8 CPU profile to <dir>/<role>/ when it
 * exits (summarise with `node bench/profile.ts <dir>`). Profiling slows it: figures from such a run are not kept.
 */
export function profileArgs(role: string): string[] {
  const dir = process.env.BENCH_CPU_PROF;
  return dir ? ['--cpu-prof', `--cpu-prof-dir=${dir}/${role}`] : [];
}

/**
 * Runs `f`; under BENCH_CPU_PROF, records its start and end (CLOCK_MONOTONIC µs, the clock V8's profiles use) in
 * <dir>/windows.jsonl, so bench/profile.ts can keep only the samples taken while a figure was being measured
 * (not start-up, module loading or warm-up).
 */
export async function profiledWindow<T>(label: string, f: () => Promise<T>): Promise<T> {
  const dir = process.env.BENCH_CPU_PROF;
  if (!dir) return f();
  const from = Number(process.hrtime.bigint() / 1000n);
  try {
    return await f();
  } finally {
    mkdirSync(dir, { recursive: true });
    appendFileSync(`${dir}/windows.jsonl`, `${JSON.stringify({ label, from_us: from, to_us: Number(process.hrtime.bigint() / 1000n) })}\n`);
  }
}

/** Sends SIGUSR2 to a process that loaded the probe and returns its report. */
export async function readProbe(child: NodeChild): Promise<ProbeReport> {
  const next = child.next<ProbeReport & Message>('probe', 10_000);
  child.process.kill('SIGUSR2');
  return next;
}

/** `nodeArgs` go before the script (e.g. --trace-gc). The probe is always loaded. */
/**
 * The V8 flags the gateway ships with (as `npm start`, `npm run gateway` and the image start it); a bench's own
 * `nodeArgs` come after them, and for V8 the last of a flag wins, so an experiment can override one.
 */
export const GATEWAY_NODE_ARGS: readonly string[] = CHILD_NODE_ARGS.gateway;

export async function spawnGateway(env: Record<string, string>, nodeArgs: string[] = []): Promise<GatewayProcess> {
  const port = await findFreePort('127.0.0.1');
  const child = spawnNode('apps/gateway/src/main.ts', {
    nodeArgs: ['--import', PROBE, ...profileArgs('gateway'), ...(GATEWAY_FLAGS_EXPERIMENT ?? GATEWAY_NODE_ARGS), ...nodeArgs],
    env: { LOG_LEVEL: 'warn', CADRE_API_KEY: BENCH_API_KEY, HOST: '127.0.0.1', PORT: String(port), CADRE_SHUTDOWN_GRACE_MS: '500', ...env },
  });
  const fullGcs: { liveMb: number; committedMb: number }[] = [];
  child.onLine((line) => {
    // --trace-gc: "Mark-Compact 96.6 (215.0) -> 45.8 (202.0) MB" = used (committed) before -> after.
    const m = /Mark-Compact [\d.]+ \([\d.]+\) -> ([\d.]+) \(([\d.]+)\) MB/.exec(line);
    if (m) fullGcs.push({ liveMb: Number(m[1]), committedMb: Number(m[2]) });
  });
  const url = `http://127.0.0.1:${port}`;
  try {
    await until(async () => {
      if (child.process.exitCode !== null) throw new Error(`gateway exited (${child.process.exitCode}) during start-up:\n${child.output()}`);
      return fetch(`${url}/readyz`).then((r) => r.ok, () => false);
    }, 'the gateway to be ready', 30_000, 100);
  } catch (err) {
    await child.stop('SIGKILL');
    throw err;
  }
  return {
    pid: child.pid,
    port,
    url,
    target: `127.0.0.1:${port}`,
    child,
    async metrics() {
      const text = await (await fetch(`${url}/metrics`)).text();
      const out: Record<string, number> = {};
      for (const line of text.split('\n')) {
        // `name{app="gateway"} 12`: the registry's default label alone counts as unlabelled.
        const m = /^([a-z_:][a-z0-9_:]*)(?:\{app="[^"]*"\})? (\S+)$/i.exec(line);
        if (m) out[m[1]!] = Number(m[2]);
      }
      return out;
    },
    rss: () => child.rss(),
    cpuSeconds: () => child.cpuSeconds(),
    probe: () => readProbe(child),
    output: () => child.output(),
    fullGcs: () => fullGcs,
    stop: () => child.stop(),
  };
}

// ---------------------------------------------------------------------------------------------------------
// WatchTeam watchers over real grpc-js channels.

/** `n` separate client channels (each its own HTTP/2 connection: no shared subchannel pool). */
export function grpcChannels(target: string, n: number): AgentServiceClient[] {
  return Array.from({ length: n }, (_, i) =>
    new AgentServiceClient(target, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1, 'grpc.primary_user_agent': `bench-${i}` }),
  );
}

export interface WatchEnd {
  code: grpc.status;
  details: string;
  received: number;
}

export interface Watch {
  call: grpc.ClientReadableStream<TeamEventProto>;
  received: number;
  /** True once the stream has ended, whatever its status. */
  closed: boolean;
  /** Settles with the stream's final status, OK or not. */
  ended: Promise<WatchEnd>;
}

export function openWatch(client: AgentServiceClient, taskId: string, afterSeq: number, onEvent: (e: TeamEventProto) => void = () => undefined): Watch {
  const metadata = new grpc.Metadata();
  metadata.set('authorization', `Bearer ${BENCH_API_KEY}`);
  const call = client.watchTeam({ taskId, afterSeq }, metadata);
  const watch: Watch = { call, received: 0, closed: false, ended: undefined as unknown as Promise<WatchEnd> };
  watch.ended = new Promise((resolve) => {
    call.on('data', (e: TeamEventProto) => {
      watch.received++;
      onEvent(e);
    });
    call.on('error', () => undefined); // the status event below carries the code
    call.on('status', (s: grpc.StatusObject) => {
      watch.closed = true;
      resolve({ code: s.code, details: s.details, received: watch.received });
    });
  });
  return watch;
}

export function closeChannels(clients: AgentServiceClient[]): void {
  for (const c of clients) c.close();
}

/** Gives grpc-js and ioredis a moment to flush before a process exits. */
export const settle = (): Promise<void> => sleep(50);

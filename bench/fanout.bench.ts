// Fan-out: N WatchTeam watchers on one live task while its worker appends events at a fixed rate, against a raw
// baseline where every reader runs its own XREAD BLOCK on the same stream. Latency is append call → receipt,
// both on this process's clock. Redis reads come from INFO commandstats and the gateway's own tail counter.
// The gateway is the real one, as a child process; watchers, raw readers and the appender live in this one.
//
//   npm exec -- node bench/fanout.bench.ts
import { Redis } from 'ioredis';
import { KeyBuilder, type TaskStore } from '@cadre/store';
import {
  benchStore, closeChannels, createLiveTask, finishLiveTask, grpcChannels, newPrefix, openWatch, spawnGateway, startPrivateRedis,
  type GatewayProcess, type LiveTask, type Watch,
} from './support/harness.ts';
import { paced, summarize, until, type LatencySummary } from './support/latency.ts';
import { RedisStats, round, totalCalls } from './support/redis-stats.ts';
import { note, printTable, saveResults } from './support/report.ts';

const RATE = 1_000;
/** A second Cadre point at a lower rate: what the same 100 watchers get when the box is not saturated. */
const LOW_RATE = 200;
const SECONDS = 5;
const WATCHERS = 100;
/** Watchers share a few HTTP/2 connections, as UIs behind a few proxies would. */
const CHANNELS = 4;

interface Phase {
  mode: 'cadre' | 'raw';
  readers: number;
  rate_target: number;
  rate: number;
  events: number;
  latency: LatencySummary;
  /** Streams closed before the task ended (Cadre: RESOURCE_EXHAUSTED for a watcher that fell too far behind). */
  closed_early: number;
  early_status?: string;
  /** Stream reads Redis served in the window: XRANGE (Cadre's tails and catch-ups) or XREAD (raw). */
  stream_reads: number;
  /** Cadre only: reads made by the gateway's shared tail (cadre_fanout_tail_reads_total). */
  tail_reads?: number;
  redis_commands: number;
  /** CPU seconds used in the window by this process (readers + appender) and by the gateway process. */
  cpu_bench_s: number;
  cpu_gateway_s?: number;
  window_s: number;
}

interface Bench {
  store: TaskStore;
  stats: RedisStats;
  gateway: GatewayProcess;
  redisUrl: string;
  keys: KeyBuilder;
}

/** Appends `count` worker_phase events at `rate`; event i carries turn = i, so a receiver finds its send time. */
async function appendAtRate(b: Bench, task: LiveTask, count: number, rate: number, t0: Float64Array): Promise<number> {
  let failed = 0;
  const achieved = await paced(count, rate, (i) => {
    t0[i] = performance.now();
    b.store.appendWorkerEvent(task.taskId, task.workerId, task.lease, 'worker_phase', { phase: 'thinking', mode: 'bench', turn: i }).catch(() => failed++);
  });
  if (failed > 0) throw new Error(`${failed} appends failed`);
  return achieved;
}

const appendWarmUp = (b: Bench, task: LiveTask): Promise<number> =>
  b.store.appendWorkerEvent(task.taskId, task.workerId, task.lease, 'worker_phase', { phase: 'thinking', mode: 'warm', turn: 0 });

function cpuMark(gateway?: GatewayProcess): () => Pick<Phase, 'cpu_bench_s' | 'cpu_gateway_s' | 'window_s'> {
  const start = performance.now();
  const bench = process.cpuUsage();
  const gw = gateway?.cpuSeconds();
  return () => {
    const d = process.cpuUsage(bench);
    return {
      cpu_bench_s: round((d.user + d.system) / 1e6, 2),
      ...(gateway && gw !== undefined && { cpu_gateway_s: round(gateway.cpuSeconds() - gw, 2) }),
      window_s: round((performance.now() - start) / 1000, 2),
    };
  };
}

const closedCount = (watches: Watch[]): number => watches.filter((w) => w.closed).length;

async function cadrePhase(b: Bench, readers: number, rate: number): Promise<Phase> {
  const task = await createLiveTask(b.store, 'fanout');
  const count = rate * SECONDS;
  const t0 = new Float64Array(count);
  const lat = new Float64Array(readers * count).fill(NaN);
  let warm = 0;
  let got = 0;
  const clients = grpcChannels(b.gateway.target, Math.min(CHANNELS, readers));
  const watches = Array.from({ length: readers }, (_, w) =>
    openWatch(clients[w % clients.length]!, task.taskId, task.lastSeq, (e) => {
      if (e.event?.$case !== 'workerPhase') return;
      const { mode, turn } = e.event.value;
      if (mode === 'warm') warm++;
      else if (mode === 'bench') {
        lat[w * count + turn] = performance.now() - t0[turn]!;
        got++;
      }
    }),
  );
  // Every watcher attached and caught up: it saw an event appended after it was opened.
  await appendWarmUp(b, task);
  await until(() => warm === readers, `${readers} watchers to attach`);

  // /metrics reads Redis itself (queue depth, task counts): read it outside the counted window.
  const before = await b.gateway.metrics();
  await b.stats.reset();
  const cpu = cpuMark(b.gateway);
  const achieved = await appendAtRate(b, task, count, rate, t0);
  // A closed watcher will not get the rest: stop waiting for it.
  await until(() => got + closedCount(watches) * count >= readers * count, 'every event at every watcher', 5_000).catch(() => undefined);
  const used = cpu();
  const counts = await b.stats.counts();
  const after = await b.gateway.metrics();

  await finishLiveTask(b.store, task);
  const ends = await Promise.all(watches.map((w) => w.ended));
  closeChannels(clients);
  const early = ends.filter((e) => e.code !== 0);
  return {
    mode: 'cadre',
    readers,
    rate_target: rate,
    rate: round(achieved),
    events: count,
    latency: summarize(lat),
    closed_early: early.length,
    ...(early[0] && { early_status: `${early[0].code} ${early[0].details}` }),
    stream_reads: counts.xrange ?? 0,
    tail_reads: (after.cadre_fanout_tail_reads_total ?? NaN) - (before.cadre_fanout_tail_reads_total ?? NaN),
    redis_commands: totalCalls(counts),
    ...used,
  };
}

async function rawPhase(b: Bench, readers: number, rate: number): Promise<Phase> {
  const task = await createLiveTask(b.store, 'fanout-raw');
  const stream = b.keys.task(task.taskId).events;
  const count = rate * SECONDS;
  const t0 = new Float64Array(count);
  const lat = new Float64Array(readers * count).fill(NaN);
  let warm = 0;
  let got = 0;
  const conns = Array.from({ length: readers }, () => new Redis(b.redisUrl, { connectionName: 'bench-raw-reader' }));
  await Promise.all(conns.map((c) => c.ping()));
  // Each reader: its own blocking XREAD from its own cursor, decoding the fields the gateway decodes.
  const loops = conns.map(async (conn, w) => {
    let cursor = `${task.lastSeq}-0`;
    while (true) {
      const reply = (await conn.xread('BLOCK', 0, 'STREAMS', stream, cursor)) as [string, [string, string[]][]][] | null;
      const now = performance.now();
      for (const [, entries] of reply ?? []) {
        for (const [id, flat] of entries) {
          cursor = id;
          const f: Record<string, string> = {};
          for (let i = 0; i + 1 < flat.length; i += 2) f[flat[i]!] = flat[i + 1]!;
          if (f.t === 'task_completed') return;
          if (f.t !== 'worker_phase') continue;
          const p = JSON.parse(f.p ?? '{}') as { mode: string; turn: number };
          if (p.mode === 'warm') warm++;
          else if (p.mode === 'bench') {
            lat[w * count + p.turn] = now - t0[p.turn]!;
            got++;
          }
        }
      }
    }
  });
  await appendWarmUp(b, task);
  await until(() => warm === readers, `${readers} raw readers to attach`);

  await b.stats.reset();
  const cpu = cpuMark();
  const achieved = await appendAtRate(b, task, count, rate, t0);
  await until(() => got === readers * count, 'every event at every raw reader', 5_000).catch(() => undefined);
  const used = cpu();
  const counts = await b.stats.counts();

  await finishLiveTask(b.store, task);
  await Promise.all(loops);
  await Promise.all(conns.map((c) => c.quit()));
  return {
    mode: 'raw',
    readers,
    rate_target: rate,
    rate: round(achieved),
    events: count,
    latency: summarize(lat),
    closed_early: 0,
    stream_reads: counts.xread ?? 0,
    redis_commands: totalCalls(counts),
    ...used,
  };
}

async function main(): Promise<void> {
  const redis = await startPrivateRedis();
  const prefix = newPrefix();
  const gateway = await spawnGateway({ REDIS_URL: redis.url, CADRE_KEY_PREFIX: prefix });
  const b: Bench = { store: benchStore(redis.url, prefix), stats: new RedisStats(redis.url), gateway, redisUrl: redis.url, keys: new KeyBuilder(prefix) };
  try {
    const c1 = await cadrePhase(b, 1, RATE);
    const c100 = await cadrePhase(b, WATCHERS, RATE);
    const c100low = await cadrePhase(b, WATCHERS, LOW_RATE);
    const r1 = await rawPhase(b, 1, RATE);
    const r100 = await rawPhase(b, WATCHERS, RATE);
    const phases = [c1, c100, c100low, r1, r100];

    printTable(`Fan-out on one task, ${SECONDS} s per row; latency = append call → receipt (gateway: child process)`, [
      ['reader', 'n', 'ev/s', 'p50 ms', 'p99 ms', 'max ms', 'missed', 'closed', 'stream reads', 'per event', 'tail reads', 'cpu s bench/gw'],
      ...phases.map((p) => [
        p.mode === 'cadre' ? 'cadre WatchTeam (grpc-js)' : 'raw XREAD BLOCK per conn',
        p.readers, p.rate, p.latency.p50_ms, p.latency.p99_ms, p.latency.max_ms, p.latency.missing, p.closed_early, p.stream_reads,
        round(p.stream_reads / p.events, 3), p.tail_reads ?? '-', `${p.cpu_bench_s}/${p.cpu_gateway_s ?? '-'}`,
      ]),
    ]);
    const ratios = {
      p99_cadre_over_raw_at_100: round(c100.latency.p99_ms / r100.latency.p99_ms, 2),
      reads_raw_over_cadre_at_100: round(r100.stream_reads / Math.max(1, c100.stream_reads), 1),
      cadre_reads_100_over_1: round(c100.stream_reads / Math.max(1, c1.stream_reads), 2),
      raw_reads_100_over_1: round(r100.stream_reads / Math.max(1, r1.stream_reads), 1),
    };
    note(`p99 at ${WATCHERS} readers × ${RATE}/s: cadre ${c100.latency.p99_ms} ms vs raw ${r100.latency.p99_ms} ms (×${ratios.p99_cadre_over_raw_at_100}); goal: cadre ≤ 10 ms. At ${LOW_RATE}/s: cadre ${c100low.latency.p99_ms} ms.`);
    note(`stream reads, ${WATCHERS} vs 1 reader: cadre ×${ratios.cadre_reads_100_over_1}, raw ×${ratios.raw_reads_100_over_1}; at ${WATCHERS}, raw makes ×${ratios.reads_raw_over_cadre_at_100} cadre's reads.`);
    if (c100.early_status) note(`closed early: ${c100.closed_early} watchers, e.g. status ${c100.early_status}`);
    saveResults('fanout', { seconds: SECONDS, grpc_channels: CHANNELS, phases, ratios });
  } finally {
    await gateway.stop();
    await b.stats.close();
    await b.store.redis.quit().catch(() => undefined);
    await redis.stop();
  }
}

await main();

// Fan-out: 100 WatchTeam watchers on one live task while its worker appends events at 200/s, against the ceiling
// (a bare grpc-js server in its own process broadcasting pre-encoded messages to the same watchers) and raw
// per-reader XREAD BLOCK. Every part is a process of its own: gateway, appender (bench/load/fanout-appender.ts),
// watchers (bench/load/fanout-watchers.ts), broadcaster (bench/load/grpc-broadcaster.ts). Rounds alternate
// cadre, ceiling, raw. Latency is append call (or broadcast) → receipt on CLOCK_MONOTONIC, which every process
// on the machine shares; efficiency is deliveries per CPU-second of the serving process (gateway or broadcaster).
//
//   npm exec -- node bench/fanout.bench.ts
import { KeyBuilder, type TaskStore } from '@cadre/store';
import { base64ToF64 } from './support/child.ts';
import { benchStore, createLiveTask, finishLiveTask, newPrefix, profiledWindow, spawnGateway, startPrivateRedis, type GatewayProcess } from './support/harness.ts';
import { summarize, type LatencySummary } from './support/latency.ts';
import { spawnNode, type Message, type NodeChild } from './support/procs.ts';
import { RedisStats, round, totalCalls } from './support/redis-stats.ts';
import { note, printTable, progress, saveResults } from './support/report.ts';
import { alternate, range } from './support/rounds.ts';

const RATE = Number(process.env.BENCH_FANOUT_RATE ?? 200);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const WATCHERS = 100;
/** Watchers share a few HTTP/2 connections, as UIs behind a few proxies would. */
const CHANNELS = 4;
const COUNT = RATE * SECONDS;

interface Phase {
  rate: number;
  events: number;
  deliveries: number;
  latency: LatencySummary;
  /** Streams closed before they had every event (Cadre: RESOURCE_EXHAUSTED for a watcher that fell behind). */
  closed_early: number;
  early_status?: string;
  /** CPU seconds in the window: the serving process (gateway or broadcaster; none for raw XREAD), the watchers' process, Redis. */
  server_cpu_s?: number;
  watchers_cpu_s: number;
  redis_cpu_s: number;
  /** Deliveries per CPU-second of the serving process. */
  deliveries_per_server_cpu_s?: number;
  /** Stream reads Redis served in the window: XRANGE (Cadre's shared tail and catch-ups) or XREAD (raw). */
  stream_reads?: number;
  tail_reads?: number;
  /** Events the gateway's tail took from the append notifications that carried them (no read). */
  entries_carried?: number;
  /**
   * Batches of events watchers took late from their buffers because their streams were full (write() returned
   * false): the observations of `cadre_fanout_late_lag_seconds`, which a watcher makes once per late batch.
   */
  late_batches?: number;
  redis_commands?: number;
}

interface Bench {
  store: TaskStore;
  stats: RedisStats;
  gateway: GatewayProcess;
  broadcaster: NodeChild;
  broadcasterTarget: string;
  redisUrl: string;
  prefix: string;
  keys: KeyBuilder;
}

type Done = Message & { arrivals: string; delivered: number; closed_early: number; early_status?: string; cpu_s: number };

function latencies(t0: Float64Array, d: Done): LatencySummary {
  const arrivals = base64ToF64(d.arrivals);
  const lat = new Float64Array(arrivals.length);
  for (let i = 0; i < arrivals.length; i++) lat[i] = arrivals[i]! - t0[i % COUNT]!;
  return summarize(lat);
}

function spawnWatchers(opts: object): NodeChild {
  return spawnNode('bench/load/fanout-watchers.ts', { args: [JSON.stringify({ readers: WATCHERS, channels: CHANNELS, count: COUNT, ...opts })] });
}

/** Waits for every delivery (or a closed stream), at most 10 s past the last send; then takes what arrived. */
async function collect(watchers: NodeChild): Promise<Done> {
  try {
    return await watchers.next<Done>('done', 10_000);
  } catch {
    watchers.send({ cmd: 'report' });
    return watchers.next<Done>('done');
  }
}

async function cadre(b: Bench, mode: 'grpc' | 'xread'): Promise<Phase> {
  const task = await createLiveTask(b.store, `fanout-${mode}`);
  const watchers = spawnWatchers(mode === 'grpc'
    ? { mode, target: b.gateway.target, taskId: task.taskId, afterSeq: task.lastSeq }
    : { mode, redisUrl: b.redisUrl, stream: b.keys.task(task.taskId).events, taskId: task.taskId, afterSeq: task.lastSeq });
  const appender = spawnNode('bench/load/fanout-appender.ts', {
    args: [JSON.stringify({ redisUrl: b.redisUrl, prefix: b.prefix, taskId: task.taskId, workerId: task.workerId, lease: task.lease, count: COUNT, rate: RATE })],
  });
  // Every watcher attached and caught up: it saw an event appended after it was opened (or replayed it).
  await b.store.appendWorkerEvent(task.taskId, task.workerId, task.lease, 'worker_phase', { phase: 'thinking', mode: 'warm', turn: 0 });
  await Promise.all([watchers.next('attached', 30_000), appender.next('ready', 30_000)]);
  progress(`${mode}: watchers attached`);
  // /metrics reads Redis itself (queue depth, task counts): read it outside the counted window.
  const before = mode === 'grpc' ? await b.gateway.metrics() : undefined;
  await b.stats.reset();
  const redisCpu = await b.stats.cpuSeconds();
  const gwCpu = b.gateway.cpuSeconds();
  const [sent, done] = await profiledWindow(`fanout ${mode}`, async () => {
    appender.send({ cmd: 'go' });
    const appended = await appender.next<Message & { t0: string; achieved: number; failed: number }>('done', (SECONDS + 60) * 1000);
    progress(`${mode}: appended`);
    return [appended, await collect(watchers)] as const;
  });
  progress(`${mode}: collected`);
  const gwUsed = b.gateway.cpuSeconds() - gwCpu;
  const redisUsed = (await b.stats.cpuSeconds()) - redisCpu;
  const counts = await b.stats.counts();
  const after = mode === 'grpc' ? await b.gateway.metrics() : undefined;
  if (sent.failed > 0) throw new Error(`${sent.failed} appends failed`);
  await finishLiveTask(b.store, task);
  watchers.send({ cmd: 'finish' });
  await Promise.all([watchers.exited, appender.exited]);
  return {
    rate: sent.achieved,
    events: COUNT,
    deliveries: done.delivered,
    latency: latencies(base64ToF64(sent.t0), done),
    closed_early: done.closed_early,
    ...(done.early_status && { early_status: done.early_status }),
    ...(mode === 'grpc' && { server_cpu_s: round(gwUsed, 2), deliveries_per_server_cpu_s: Math.round(done.delivered / gwUsed) }),
    watchers_cpu_s: done.cpu_s,
    redis_cpu_s: round(redisUsed, 2),
    stream_reads: mode === 'grpc' ? (counts.xrange ?? 0) : (counts.xread ?? 0),
    ...(before && after && {
      tail_reads: (after.cadre_fanout_tail_reads_total ?? NaN) - (before.cadre_fanout_tail_reads_total ?? NaN),
      entries_carried: (after.cadre_fanout_entries_carried_total ?? NaN) - (before.cadre_fanout_entries_carried_total ?? NaN),
      late_batches: (after.cadre_fanout_late_lag_seconds_count ?? NaN) - (before.cadre_fanout_late_lag_seconds_count ?? NaN),
    }),
    redis_commands: totalCalls(counts),
  };
}

async function ceiling(b: Bench): Promise<Phase> {
  const watchers = spawnWatchers({ mode: 'grpc', target: b.broadcasterTarget, taskId: 'ceiling', afterSeq: 0 });
  const attached = watchers.next('attached', 30_000);
  let ok = false;
  void attached.then(() => (ok = true), () => undefined);
  // The broadcaster only reaches calls already open: warm until every watcher has seen one.
  for (let i = 0; i < 300 && !ok; i++) {
    b.broadcaster.send({ cmd: 'warm' });
    await b.broadcaster.next('warmed');
    await new Promise((r) => setTimeout(r, 100));
  }
  await attached;
  progress('ceiling: watchers attached');
  const cpu = b.broadcaster.cpuSeconds();
  const redisCpu = await b.stats.cpuSeconds();
  b.broadcaster.send({ cmd: 'go', count: COUNT, rate: RATE });
  const sent = await b.broadcaster.next<Message & { t0: string; achieved: number }>('done', (SECONDS + 60) * 1000);
  const done = await collect(watchers);
  const used = b.broadcaster.cpuSeconds() - cpu;
  const redisUsed = (await b.stats.cpuSeconds()) - redisCpu;
  watchers.send({ cmd: 'finish' });
  await watchers.exited;
  return {
    rate: sent.achieved,
    events: COUNT,
    deliveries: done.delivered,
    latency: latencies(base64ToF64(sent.t0), done),
    closed_early: done.closed_early,
    server_cpu_s: round(used, 2),
    deliveries_per_server_cpu_s: Math.round(done.delivered / used),
    watchers_cpu_s: done.cpu_s,
    redis_cpu_s: round(redisUsed, 2),
  };
}

async function main(): Promise<void> {
  const redis = await startPrivateRedis();
  const prefix = newPrefix();
  const gateway = await spawnGateway({ REDIS_URL: redis.url, CADRE_KEY_PREFIX: prefix });
  const broadcaster = spawnNode('bench/load/grpc-broadcaster.ts');
  const b: Bench = {
    store: benchStore(redis.url, prefix), stats: new RedisStats(redis.url), gateway, broadcaster, redisUrl: redis.url, prefix, keys: new KeyBuilder(prefix),
    broadcasterTarget: `127.0.0.1:${(await broadcaster.next<Message & { port: number }>('listening')).port}`,
  };
  try {
    const samples = await alternate(ROUNDS, { cadre: () => cadre(b, 'grpc'), ceiling: () => ceiling(b), raw_xread: () => cadre(b, 'xread') });
    printTable(`Fan-out: ${WATCHERS} watchers (${CHANNELS} channels, own process) × ${RATE} ev/s, ${SECONDS} s per sample; latency = append call → receipt`, [
      ['round', 'side', 'ev/s', 'deliveries', 'p50 ms', 'p99 ms', 'max ms', 'missed', 'closed', 'server cpu s', 'deliveries/server cpu s', 'watchers cpu s', 'redis cpu s', 'stream reads', 'load', 'box busy'],
      ...samples.map((s) => [
        s.round, s.side, s.rate, s.deliveries, s.latency.p50_ms, s.latency.p99_ms, s.latency.max_ms, s.latency.missing, s.closed_early,
        s.server_cpu_s ?? '-', s.deliveries_per_server_cpu_s ?? '-', s.watchers_cpu_s, s.redis_cpu_s, s.stream_reads ?? '-', s.load.loadavg.join('/'), s.machine_busy,
      ]),
    ]);
    const of = (side: string) => samples.filter((s) => s.side === side);
    const efficiency = of('cadre').map((c) => c.deliveries_per_server_cpu_s! / of('ceiling').find((x) => x.round === c.round)!.deliveries_per_server_cpu_s!);
    const p99 = (side: string): number[] => of(side).map((s) => s.latency.p99_ms);
    const readsPerEvent = (side: string): number[] => of(side).map((s) => s.stream_reads! / s.events);
    note(`efficiency: cadre ${range(of('cadre').map((s) => s.deliveries_per_server_cpu_s!), 0)} deliveries per gateway CPU-second, ceiling ${range(of('ceiling').map((s) => s.deliveries_per_server_cpu_s!), 0)}; per round ×${range(efficiency, 2)} (goal ≥ 0.7×)`);
    note(`p99: cadre ${range(p99('cadre'))} ms (goal ≤ 10 ms), ceiling ${range(p99('ceiling'))} ms, raw XREAD ${range(p99('raw_xread'))} ms`);
    note(`stream reads per event at ${WATCHERS} readers: cadre ${range(readsPerEvent('cadre'), 2)} (one shared tail), raw XREAD ${range(readsPerEvent('raw_xread'), 1)}`);
    note(`events the gateway's tail took from their notifications, no read: ${range(of('cadre').map((s) => s.entries_carried! / s.events), 3)} of those appended`);
    note(`batches taken late from a watcher's buffer (its stream was full), per delivery: ${range(of('cadre').map((s) => s.late_batches! / s.deliveries), 3)}`);
    const early = samples.find((s) => s.early_status);
    if (early) note(`closed early: e.g. ${early.side} round ${early.round}: ${early.early_status}`);
    saveResults('fanout', {
      watchers: WATCHERS, rate: RATE, seconds: SECONDS, grpc_channels: CHANNELS, rounds: ROUNDS, samples,
      summary: {
        cadre_deliveries_per_cpu_s: of('cadre').map((s) => s.deliveries_per_server_cpu_s), ceiling_deliveries_per_cpu_s: of('ceiling').map((s) => s.deliveries_per_server_cpu_s),
        efficiency_ratio: efficiency.map((x) => round(x, 2)), cadre_p99_ms: p99('cadre'), ceiling_p99_ms: p99('ceiling'), raw_xread_p99_ms: p99('raw_xread'),
        cadre_reads_per_event: readsPerEvent('cadre').map((x) => round(x, 3)), raw_reads_per_event: readsPerEvent('raw_xread').map((x) => round(x, 1)),
        closed_early: samples.reduce((a, s) => a + s.closed_early, 0),
      },
    });
  } finally {
    broadcaster.send({ cmd: 'exit' });
    await broadcaster.stop();
    await gateway.stop();
    await b.stats.close();
    await b.store.redis.quit().catch(() => undefined);
    await redis.stop();
  }
}

await main();

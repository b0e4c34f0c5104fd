// What one POST /api/tasks costs the gateway: its CPU per request from /proc/<pid>/stat over a window of N
// requests, beside the same for requests that do less (a GET of a task, a POST the schema refuses, /healthz), Redis
// commands and Redis CPU per request, and the gateway's GC time (bench/support/probe.ts). The gateway runs alone
// (no worker pool, no watchers) on a private redis-server; the requests come from bench/load/submit-client.ts in a
// process of its own, one at a time and 8 in flight. Every round measures each kind once, in the same order, so a
// slow spell lands on all of them. CPU per request moves far less with the machine's load than latency does.
//   npm exec -- node bench/submit.bench.ts
//   BENCH_CPU_PROF=/tmp/prof npm exec -- node bench/submit.bench.ts && npm exec -- node bench/profile.ts /tmp/prof 30 'submit post'
import { profiledWindow, spawnGateway, startPrivateRedis } from './support/harness.ts';
import type { LatencySummary } from './support/latency.ts';
import { cpuTimesOf, spawnNode, type Message } from './support/procs.ts';
import { RedisStats, round, topCommands, totalCalls } from './support/redis-stats.ts';
import { note, printTable, progress, saveResults } from './support/report.ts';
import { alternate, median, range } from './support/rounds.ts';
import type { SubmitKind } from './load/submit-client.ts';

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 1000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const WARMUP = 500;

interface Sample {
  requests: number;
  /** Gateway CPU (user + system, /proc) per request. */
  gateway_cpu_ms: number;
  /** Of which in the kernel (system time: socket reads and writes, epoll). */
  gateway_sys_ms: number;
  /** Of which the gateway's GC pauses (probe), per request. */
  gateway_gc_ms: number;
  redis_cpu_ms: number;
  redis_commands: number;
  top_commands: Record<string, number>;
  latency: LatencySummary;
  per_s: number;
}

const KINDS: Record<string, { kind: SubmitKind; concurrency: number }> = {
  post_1: { kind: 'post', concurrency: 1 },
  post_8: { kind: 'post', concurrency: 8 },
  get_1: { kind: 'get', concurrency: 1 },
  refused_1: { kind: 'refused', concurrency: 1 },
  healthz_1: { kind: 'healthz', concurrency: 1 },
};

const redis = await startPrivateRedis();
const stats = new RedisStats(redis.url);
const gateway = await spawnGateway({ REDIS_URL: redis.url });
const client = spawnNode('bench/load/submit-client.ts', { args: [JSON.stringify({ url: gateway.url })] });
const run = async (kind: SubmitKind, requests: number, concurrency: number) => {
  client.send({ cmd: 'run', kind, requests, concurrency });
  return client.next<Message & { seconds: number; latency: LatencySummary }>('done', 300_000);
};
try {
  await client.next('ready');
  // Warm-up (JIT, connections, Ajv's compiled schemas, the task listing's first pages) for every kind.
  for (const { kind, concurrency } of Object.values(KINDS)) await run(kind, WARMUP, concurrency);
  progress('warm; measuring');
  const measure = (name: string) => async (): Promise<Sample> => {
    const { kind, concurrency } = KINDS[name]!;
    await gateway.probe();
    await stats.reset();
    const redisCpu0 = await stats.cpuSeconds();
    const cpu0 = cpuTimesOf(gateway.pid);
    const r = await profiledWindow(`submit ${name}`, () => run(kind, REQUESTS, concurrency));
    const cpu1 = cpuTimesOf(gateway.pid);
    const cpu = cpu1.user + cpu1.system - cpu0.user - cpu0.system;
    const probe = await gateway.probe();
    const redisCpu = (await stats.cpuSeconds()) - redisCpu0;
    const { calls } = await stats.detail();
    return {
      requests: REQUESTS,
      gateway_cpu_ms: round((cpu * 1000) / REQUESTS, 3),
      gateway_sys_ms: round(((cpu1.system - cpu0.system) * 1000) / REQUESTS, 3),
      gateway_gc_ms: round(probe.gc.total_ms / REQUESTS, 3),
      redis_cpu_ms: round((redisCpu * 1000) / REQUESTS, 3),
      redis_commands: round(totalCalls(calls) / REQUESTS, 1),
      top_commands: topCommands(calls, 10, REQUESTS),
      latency: r.latency,
      per_s: round(REQUESTS / r.seconds, 0),
    };
  };
  const samples = await alternate(ROUNDS, Object.fromEntries(Object.keys(KINDS).map((k) => [k, measure(k)])));

  printTable(`Gateway cost per request: ${REQUESTS} requests per sample, gateway alone (no worker), rounds measure each kind in turn`, [
    ['round', 'kind', 'gateway cpu ms', 'of it kernel ms', 'of it GC ms', 'redis cpu ms', 'redis cmds', 'p50/p99/mean ms', 'req/s', 'load', 'box busy'],
    ...samples.map((s) => [
      s.round, s.side, s.gateway_cpu_ms, s.gateway_sys_ms, s.gateway_gc_ms, s.redis_cpu_ms, s.redis_commands,
      `${s.latency.p50_ms}/${s.latency.p99_ms}/${s.latency.mean_ms}`, s.per_s, s.load.loadavg.join('/'), s.machine_busy,
    ]),
  ]);
  const of = (side: string, f: (s: Sample) => number): number[] => samples.filter((s) => s.side === side).map(f);
  for (const side of Object.keys(KINDS)) {
    const cpu = of(side, (s) => s.gateway_cpu_ms);
    note(`${side}: gateway CPU ${range(cpu, 3)} ms per request (median ${round(median(cpu), 3)}), p50 ${range(of(side, (s) => s.latency.p50_ms), 2)} ms, Redis commands ${range(of(side, (s) => s.redis_commands))}`);
  }
  const first = samples.find((s) => s.side === 'post_1')!;
  note(`post_1 Redis commands per POST (round 1): ${Object.entries(first.top_commands).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  saveResults('submit', {
    requests: REQUESTS, rounds: ROUNDS, samples,
    summary: Object.fromEntries(Object.keys(KINDS).flatMap((side) => [
      [`${side}_gateway_cpu_ms`, of(side, (s) => s.gateway_cpu_ms)],
      [`${side}_p50_ms`, of(side, (s) => s.latency.p50_ms)],
      [`${side}_redis_commands`, of(side, (s) => s.redis_commands)],
    ])),
  });
} finally {
  client.send({ cmd: 'exit' });
  await client.stop();
  await gateway.stop();
  await stats.close();
  await redis.stop();
}

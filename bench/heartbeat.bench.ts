// Heartbeats of 200 simulated VM agents against the real gateway (one Lua script per heartbeat), side by side
// with a bare Fastify route answering fixed JSON, and the same route making one Redis round trip per request
// first (route+redis: an EVALSHA of a small script on the bench's Redis, over a connection without autopipelining
// like the gateway's heartbeat connection): what a third process on the path costs on this machine by itself.
// The client is a process of its own (bench/load/heartbeat-client.ts); gateway and routes each run in theirs with
// bench/support/probe.ts loaded. Rounds alternate gateway, route, route+redis, gateway, ...: first closed loop
// (throughput), then open loop at half the gateway's median throughput (latency), with each server's event-loop
// delay, GC, and Redis's script time and CPU beside each sample; then how long stop-all takes over 1,000 active runs.
//   npm exec -- node bench/heartbeat.bench.ts
//   npm exec -- node bench/heartbeat.bench.ts --max-semi-space-size=2   # extra args go to the gateway's node
//   BENCH_REDIS_UNIX=1 npm exec -- node bench/heartbeat.bench.ts        # the gateway reaches Redis over a Unix socket
import { GATEWAY_NODE_ARGS, profiledWindow, readProbe, spawnGateway, startPrivateRedis, PROBE, profileArgs, type ProbeReport } from './support/harness.ts';
import { loadText } from './support/machine.ts';
import { cpuSecondsOf, spawnNode, type Message } from './support/procs.ts';
import { RedisStats, round, scriptTotal } from './support/redis-stats.ts';
import { note, printTable, saveResults } from './support/report.ts';
import { alternate, median, range } from './support/rounds.ts';
import type { LatencySummary } from './support/latency.ts';

const AGENTS = 200;
const WORKSPACES = 20;
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const RUNS_KEY = 'bench-runs-key';
const CONTROL_KEY = 'bench-control-key';

interface Closed { rate: number; errors: number; client_cpu_s: number; client_loop_delay_p99_ms: number; server_cpu_s: number }
interface Open {
  latency: LatencySummary; errors: number; achieved: number; client_cpu_s: number; client_loop_delay_p99_ms: number; server_cpu_s: number;
  server: ProbeReport;
  /** Gateway and route+redis: the script's mean time inside Redis, commands slower than 1 ms, Redis's CPU. */
  lua_us_per_call?: number;
  redis_slow?: { entries: number; slowest: string[] };
  redis_cpu_s?: number;
}

async function post(port: number, path: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-windie-runs-key': RUNS_KEY, ...headers }, body: JSON.stringify(body) });
  return { status: res.status, text: await res.text() };
}

const redis = await startPrivateRedis();
const stats = new RedisStats(redis.url);
const gatewayNodeArgs = process.argv.slice(2);
const gateway = await spawnGateway({ REDIS_URL: redis.gatewayUrl, RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: CONTROL_KEY, RUNS_MAX_ACTIVE_PER_WORKSPACE: '1000', RUNS_WORKER_TTL_MS: '60000' }, gatewayNodeArgs);
const fixed = spawnNode('bench/support/fixed-json-server.ts', { nodeArgs: ['--import', PROBE, ...profileArgs('fixed-json')] });
const routeRedis = spawnNode('bench/support/fixed-json-server.ts', { nodeArgs: ['--import', PROBE, ...profileArgs('route-redis')], args: [JSON.stringify({ redisUrl: redis.gatewayUrl })] });
const client = spawnNode('bench/load/heartbeat-client.ts', { args: [JSON.stringify({ agents: AGENTS, workspaces: WORKSPACES, runsKey: RUNS_KEY })] });
try {
  const fixedPort = (await fixed.next<Message & { port: number }>('listening')).port;
  const routeRedisPort = (await routeRedis.next<Message & { port: number }>('listening')).port;
  await client.next('ready');
  const servers = { cadre: { port: gateway.port, proc: gateway.child }, fixed_json: { port: fixedPort, proc: fixed }, route_redis: { port: routeRedisPort, proc: routeRedis } };
  const run = async <T>(cmd: { cmd: 'closed' | 'open'; port: number; seconds: number; rate?: number }): Promise<T> => {
    client.send(cmd);
    return client.next<T & Message>(cmd.cmd, (cmd.seconds + 120) * 1000);
  };
  // Warm every side up (JIT, connections).
  for (const s of Object.values(servers)) await run({ cmd: 'closed', port: s.port, seconds: 1 });

  const side = (name: keyof typeof servers) => async (): Promise<Closed> => {
    const { port, proc } = servers[name];
    const cpu = proc.cpuSeconds();
    const r = await profiledWindow(`heartbeat closed ${name}`, () => run<Omit<Closed, 'server_cpu_s'>>({ cmd: 'closed', port, seconds: SECONDS }));
    return { ...r, server_cpu_s: round(proc.cpuSeconds() - cpu, 2) };
  };
  const closed = await alternate(ROUNDS, { cadre: side('cadre'), fixed_json: side('fixed_json'), route_redis: side('route_redis') });
  const halfRate = Math.floor(median(closed.filter((s) => s.side === 'cadre').map((s) => s.rate)) / 2);

  const openSide = (name: keyof typeof servers) => async (): Promise<Open> => {
    const { port, proc } = servers[name];
    const usesRedis = name !== 'fixed_json';
    await readProbe(proc);
    if (usesRedis) {
      await stats.reset();
      await stats.slowlogFrom(1_000);
    }
    const cpu = proc.cpuSeconds();
    const redisCpu = cpuSecondsOf(redis.pid);
    const r = await profiledWindow(`heartbeat open ${name}`, () => run<Omit<Open, 'server_cpu_s' | 'server'>>({ cmd: 'open', port, rate: halfRate, seconds: SECONDS }));
    const out: Open = { ...r, server_cpu_s: round(proc.cpuSeconds() - cpu, 2), server: await readProbe(proc) };
    if (usesRedis) {
      out.redis_cpu_s = round(cpuSecondsOf(redis.pid) - redisCpu, 2);
      const { calls, usec } = await stats.detail();
      out.lua_us_per_call = round(scriptTotal(usec) / Math.max(1, scriptTotal(calls)), 1);
      out.redis_slow = await stats.slowlog();
    }
    return out;
  };
  const open = await alternate(ROUNDS, { cadre: openSide('cadre'), fixed_json: openSide('fixed_json'), route_redis: openSide('route_redis') });

  // stop-all over 1,000 active runs in 10 workspaces, a tenth of them bound to a worker.
  for (let i = 0; i < 1000; i++) {
    const res = await post(gateway.port, '/api/runs/', { workspace_id: `stop-${i % 10}`, query: `run ${i}` });
    if (res.status !== 200) throw new Error(`create run: ${res.status} ${res.text}`);
  }
  for (let i = 0; i < 100; i++) await post(gateway.port, '/api/runs/workers/heartbeat', { workspace_id: `stop-${i % 10}`, worker_id: `binder-${i}`, status: 'ready' });
  const t0 = performance.now();
  const stop = await post(gateway.port, '/api/runs/stop-all', { requested_by: 'bench' }, { 'x-windie-runs-control-key': CONTROL_KEY });
  const stopMs = performance.now() - t0;
  const stopped = (JSON.parse(stop.text) as { count: number }).count;

  printTable(`Heartbeats: ${AGENTS} agents in ${WORKSPACES} workspaces, closed loop ${SECONDS} s per sample, rounds alternate`, [
    ['round', 'target', 'heartbeats/s', 'errors', 'server cpu s', 'client cpu s', 'load (1/5/15 min)', 'box busy'],
    ...closed.map((s) => [s.round, s.side, s.rate, s.errors, s.server_cpu_s, s.client_cpu_s, s.load.loadavg.join('/'), s.machine_busy]),
  ]);
  type Side = keyof typeof servers;
  /** Per round, side a's figure over side b's. */
  const perRound = <S extends { round: number; side: string }>(samples: S[], a: Side, b: Side, f: (s: S) => number): number[] =>
    samples.filter((s) => s.side === a).map((s) => f(s) / f(samples.find((x) => x.side === b && x.round === s.round)!));
  const rates = (side: Side): number[] => closed.filter((s) => s.side === side).map((s) => s.rate);
  const ratios = perRound(closed, 'cadre', 'fixed_json', (s) => s.rate);
  const rateVsRouteRedis = perRound(closed, 'cadre', 'route_redis', (s) => s.rate);
  const routeRedisRate = perRound(closed, 'route_redis', 'fixed_json', (s) => s.rate);
  note(`throughput: cadre ${range(rates('cadre'), 0)}/s, fixed JSON ${range(rates('fixed_json'), 0)}/s, route+redis ${range(rates('route_redis'), 0)}/s; per round cadre/fixed ×${range(ratios, 2)} (goal ≥ 0.5×)`);
  note(`  split: cadre / route+redis ×${range(rateVsRouteRedis, 2)}, route+redis / route ×${range(routeRedisRate, 2)}`);
  printTable(`Latency at ${halfRate} heartbeats/s (half the gateway's median throughput), open loop, ${SECONDS} s per sample`, [
    ['round', 'target', 'p50 ms', 'p99 ms', 'max ms', 'missing', 'server loop delay p99/max ms', 'gc count/total/max ms', 'server cpu s', 'redis cpu s', 'lua µs/call', 'redis >1ms', 'client loop p99 ms', 'load', 'box busy'],
    ...open.map((s) => [
      s.round, s.side, s.latency.p50_ms, s.latency.p99_ms, s.latency.max_ms, s.latency.missing,
      `${s.server.loop_delay_ms.p99}/${s.server.loop_delay_ms.max}`, `${s.server.gc.count}/${s.server.gc.total_ms}/${s.server.gc.max_ms}`,
      s.server_cpu_s, s.redis_cpu_s ?? '-', s.lua_us_per_call ?? '-', s.redis_slow?.entries ?? '-', s.client_loop_delay_p99_ms, s.load.loadavg.join('/'), s.machine_busy,
    ]),
  ]);
  const p99 = (side: Side): number[] => open.filter((s) => s.side === side).map((s) => s.latency.p99_ms);
  const p99Ratios = perRound(open, 'cadre', 'fixed_json', (s) => s.latency.p99_ms);
  const p99VsRouteRedis = perRound(open, 'cadre', 'route_redis', (s) => s.latency.p99_ms);
  const routeRedisP99 = perRound(open, 'route_redis', 'fixed_json', (s) => s.latency.p99_ms);
  note(`p99: cadre ${range(p99('cadre'), 1)} ms, fixed JSON ${range(p99('fixed_json'), 1)} ms, route+redis ${range(p99('route_redis'), 1)} ms; per round cadre/fixed ×${range(p99Ratios, 1)} (goal ≤ 2×)`);
  note(`  split: cadre / route+redis ×${range(p99VsRouteRedis, 1)} (what Cadre adds over one Redis round trip), route+redis / route ×${range(routeRedisP99, 1)} (what the round trip to a third process costs on this machine)`);
  note(`stop-all of ${stopped} active runs (100 bound to workers): ${round(stopMs)} ms (goal: answers within 1 s); ${loadText()}`);
  saveResults('heartbeat', {
    agents: AGENTS, seconds: SECONDS, rounds: ROUNDS, gateway_node_args: gatewayNodeArgs, ...(redis.unixSocket && { redis_unix_socket: true }), gateway_shipped_node_args: GATEWAY_NODE_ARGS, half_rate: halfRate, closed, open,
    summary: {
      cadre_per_s: rates('cadre'), fixed_json_per_s: rates('fixed_json'), throughput_ratio: ratios.map((x) => round(x, 2)),
      cadre_p99_ms: p99('cadre'), fixed_json_p99_ms: p99('fixed_json'), p99_ratio: p99Ratios.map((x) => round(x, 1)),
      route_redis_per_s: rates('route_redis'), route_redis_p99_ms: p99('route_redis'),
      throughput_ratio_cadre_route_redis: rateVsRouteRedis.map((x) => round(x, 2)), throughput_ratio_route_redis_route: routeRedisRate.map((x) => round(x, 2)),
      p99_ratio_cadre_route_redis: p99VsRouteRedis.map((x) => round(x, 1)), p99_ratio_route_redis_route: routeRedisP99.map((x) => round(x, 1)),
    },
    stop_all: { runs: stopped, ms: round(stopMs) },
  });
} finally {
  client.send({ cmd: 'exit' });
  await client.stop();
  await fixed.stop();
  await routeRedis.stop();
  await gateway.stop();
  await stats.close();
  await redis.stop();
}

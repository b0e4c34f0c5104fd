// Heartbeats of 200 simulated VM agents against the real gateway (one Lua script per heartbeat), side by side
// with a bare Fastify route answering fixed JSON. The client is a process of its own (bench/load/heartbeat-
// client.ts); gateway and route each run in theirs with bench/support/probe.ts loaded. Rounds alternate
// gateway, route, gateway, route...: first closed loop (throughput), then open loop at half the gateway's median
// throughput (latency), with the gateway's event-loop delay, GC and Redis's Lua time beside each sample; then how
// long stop-all takes over 1,000 active runs.
//   npm exec -- node bench/heartbeat.bench.ts
//   npm exec -- node bench/heartbeat.bench.ts --max-semi-space-size=2   # extra args go to the gateway's node
//   BENCH_REDIS_UNIX=1 npm exec -- node bench/heartbeat.bench.ts        # the gateway reaches Redis over a Unix socket
import { GATEWAY_NODE_ARGS, profiledWindow, readProbe, spawnGateway, startPrivateRedis, PROBE, profileArgs, type ProbeReport } from './support/harness.ts';
import { loadText } from './support/machine.ts';
import { spawnNode, type Message } from './support/procs.ts';
import { RedisStats, round } from './support/redis-stats.ts';
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
  /** Gateway only: the heartbeat script's mean time inside Redis, and commands slower than 1 ms. */
  lua_us_per_call?: number;
  redis_slow?: { entries: number; slowest: string[] };
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
const client = spawnNode('bench/load/heartbeat-client.ts', { args: [JSON.stringify({ agents: AGENTS, workspaces: WORKSPACES, runsKey: RUNS_KEY })] });
try {
  const fixedPort = (await fixed.next<Message & { port: number }>('listening')).port;
  await client.next('ready');
  const servers = { cadre: { port: gateway.port, proc: gateway.child }, fixed_json: { port: fixedPort, proc: fixed } };
  const run = async <T>(cmd: { cmd: 'closed' | 'open'; port: number; seconds: number; rate?: number }): Promise<T> => {
    client.send(cmd);
    return client.next<T & Message>(cmd.cmd, (cmd.seconds + 120) * 1000);
  };
  // Warm both up (JIT, connections).
  for (const s of Object.values(servers)) await run({ cmd: 'closed', port: s.port, seconds: 1 });

  const side = (name: keyof typeof servers) => async (): Promise<Closed> => {
    const { port, proc } = servers[name];
    const cpu = proc.cpuSeconds();
    const r = await profiledWindow(`heartbeat closed ${name}`, () => run<Omit<Closed, 'server_cpu_s'>>({ cmd: 'closed', port, seconds: SECONDS }));
    return { ...r, server_cpu_s: round(proc.cpuSeconds() - cpu, 2) };
  };
  const closed = await alternate(ROUNDS, { cadre: side('cadre'), fixed_json: side('fixed_json') });
  const halfRate = Math.floor(median(closed.filter((s) => s.side === 'cadre').map((s) => s.rate)) / 2);

  const openSide = (name: keyof typeof servers) => async (): Promise<Open> => {
    const { port, proc } = servers[name];
    await readProbe(proc);
    if (name === 'cadre') {
      await stats.reset();
      await stats.slowlogFrom(1_000);
    }
    const cpu = proc.cpuSeconds();
    const r = await profiledWindow(`heartbeat open ${name}`, () => run<Omit<Open, 'server_cpu_s' | 'server'>>({ cmd: 'open', port, rate: halfRate, seconds: SECONDS }));
    const out: Open = { ...r, server_cpu_s: round(proc.cpuSeconds() - cpu, 2), server: await readProbe(proc) };
    if (name === 'cadre') {
      const { calls, usec } = await stats.detail();
      out.lua_us_per_call = round((usec.evalsha ?? 0) / Math.max(1, calls.evalsha ?? 0), 1);
      out.redis_slow = await stats.slowlog();
    }
    return out;
  };
  const open = await alternate(ROUNDS, { cadre: openSide('cadre'), fixed_json: openSide('fixed_json') });

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
  const cRates = closed.filter((s) => s.side === 'cadre').map((s) => s.rate);
  const fRates = closed.filter((s) => s.side === 'fixed_json').map((s) => s.rate);
  const ratios = closed.filter((s) => s.side === 'cadre').map((s) => s.rate / closed.find((f) => f.side === 'fixed_json' && f.round === s.round)!.rate);
  note(`throughput: cadre ${range(cRates, 0)}/s, fixed JSON ${range(fRates, 0)}/s; per round cadre/fixed ×${range(ratios, 2)} (goal ≥ 0.5×)`);
  printTable(`Latency at ${halfRate} heartbeats/s (half the gateway's median throughput), open loop, ${SECONDS} s per sample`, [
    ['round', 'target', 'p50 ms', 'p99 ms', 'max ms', 'missing', 'server loop delay p99/max ms', 'gc count/total/max ms', 'lua µs/call', 'redis >1ms', 'client loop p99 ms', 'load', 'box busy'],
    ...open.map((s) => [
      s.round, s.side, s.latency.p50_ms, s.latency.p99_ms, s.latency.max_ms, s.latency.missing,
      `${s.server.loop_delay_ms.p99}/${s.server.loop_delay_ms.max}`, `${s.server.gc.count}/${s.server.gc.total_ms}/${s.server.gc.max_ms}`,
      s.lua_us_per_call ?? '-', s.redis_slow?.entries ?? '-', s.client_loop_delay_p99_ms, s.load.loadavg.join('/'), s.machine_busy,
    ]),
  ]);
  const p99 = (side: string): number[] => open.filter((s) => s.side === side).map((s) => s.latency.p99_ms);
  const p99Ratios = open.filter((s) => s.side === 'cadre').map((s) => s.latency.p99_ms / open.find((f) => f.side === 'fixed_json' && f.round === s.round)!.latency.p99_ms);
  note(`p99: cadre ${range(p99('cadre'), 1)} ms, fixed JSON ${range(p99('fixed_json'), 1)} ms; per round ×${range(p99Ratios, 1)} (goal ≤ 2×)`);
  note(`stop-all of ${stopped} active runs (100 bound to workers): ${round(stopMs)} ms (goal: answers within 1 s); ${loadText()}`);
  saveResults('heartbeat', {
    agents: AGENTS, seconds: SECONDS, rounds: ROUNDS, gateway_node_args: gatewayNodeArgs, ...(redis.unixSocket && { redis_unix_socket: true }), gateway_shipped_node_args: GATEWAY_NODE_ARGS, half_rate: halfRate, closed, open,
    summary: {
      cadre_per_s: cRates, fixed_json_per_s: fRates, throughput_ratio: ratios.map((x) => round(x, 2)),
      cadre_p99_ms: p99('cadre'), fixed_json_p99_ms: p99('fixed_json'), p99_ratio: p99Ratios.map((x) => round(x, 1)),
    },
    stop_all: { runs: stopped, ms: round(stopMs) },
  });
} finally {
  client.send({ cmd: 'exit' });
  await client.stop();
  await fixed.stop();
  await gateway.stop();
  await stats.close();
  await redis.stop();
}

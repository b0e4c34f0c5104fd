// What one heartbeat costs the gateway, in figures the shared machine's load moves little: CPU time (from /proc)
// and bytes allocated on V8's heap (the probe with BENCH_ALLOC=1) per request, GCs per 1,000 requests, and Redis's
// CPU and commands per heartbeat; the bare fixed-JSON route of heartbeat.bench.ts beside it. A fixed number of
// requests per sample (closed loop, a fixed number in flight), from this process over keep-alive HTTP/1.1; samples
// alternate gateway, route, route+redis (the route making one EVALSHA first, as in heartbeat.bench.ts), gateway, ...
// Not a bench: nothing is recorded, latency is not measured.
//
//   npm exec -- node bench/heartbeat-cost.ts                  # 3 rounds of 10,000 heartbeats, 16 in flight
//   BENCH_ROUNDS=5 BENCH_REQUESTS=20000 npm exec -- node bench/heartbeat-cost.ts
//   npm exec -- node bench/heartbeat-cost.ts --max-semi-space-size=2   # extra args go to the gateway's node
//   BENCH_REDIS_UNIX=1 npm exec -- node bench/heartbeat-cost.ts     # the gateway reaches Redis over a Unix socket
//   BENCH_CPU_PROF=/tmp/prof npm exec -- node bench/heartbeat-cost.ts; npm exec -- node bench/profile.ts /tmp/prof 30 'cost cadre'
import http from 'node:http';
import { PROBE, profileArgs, profiledWindow, readProbe, spawnGateway, startPrivateRedis } from './support/harness.ts';
import { loadText } from './support/machine.ts';
import { spawnNode, type Message, type NodeChild } from './support/procs.ts';
import { RedisStats, round, totalCalls } from './support/redis-stats.ts';
import { printTable } from './support/report.ts';
import { alternate, range } from './support/rounds.ts';

const AGENTS = 200;
const WORKSPACES = 20;
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 10_000);
const IN_FLIGHT = Number(process.env.BENCH_IN_FLIGHT ?? 16);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const RUNS_KEY = 'bench-runs-key';

const agent = new http.Agent({ keepAlive: true, maxSockets: IN_FLIGHT });
const bodies = Array.from({ length: AGENTS }, (_, i) =>
  JSON.stringify({ workspace_id: `ws-${i % WORKSPACES}`, worker_id: `agent-${i}`, vm_id: `vm-${i}`, status: 'ready', metadata: {}, acked_command_ids: [] }));

function post(port: number, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, path: '/api/runs/workers/heartbeat', method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-windie-runs-key': RUNS_KEY } },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** `count` heartbeats, `IN_FLIGHT` at a time; throws on any answer but 200. */
async function send(port: number, count: number): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
    while (next < count) {
      const status = await post(port, bodies[next++ % AGENTS]!);
      if (status !== 200) throw new Error(`heartbeat answered ${status}`);
    }
  }));
}

interface Cost { cpu_us: number; alloc_kb: number; gcs_per_1k: number; gc_ms_per_1k: number; longest_gc_ms: number; redis_cpu_us?: number; redis_commands?: number }

const redis = await startPrivateRedis();
const stats = new RedisStats(redis.url);
const gateway = await spawnGateway({ REDIS_URL: redis.gatewayUrl, RUNS_API_KEY: RUNS_KEY, RUNS_MAX_ACTIVE_PER_WORKSPACE: '1000', RUNS_WORKER_TTL_MS: '60000', BENCH_ALLOC: '1' }, process.argv.slice(2));
const fixed = spawnNode('bench/support/fixed-json-server.ts', { nodeArgs: ['--import', PROBE, ...profileArgs('fixed-json')], env: { BENCH_ALLOC: '1' } });
const routeRedis = spawnNode('bench/support/fixed-json-server.ts', { nodeArgs: ['--import', PROBE, ...profileArgs('route-redis')], env: { BENCH_ALLOC: '1' }, args: [JSON.stringify({ redisUrl: redis.gatewayUrl })] });
try {
  const fixedPort = (await fixed.next<Message & { port: number }>('listening')).port;
  const routeRedisPort = (await routeRedis.next<Message & { port: number }>('listening')).port;
  const servers: Record<string, { port: number; proc: NodeChild }> = {
    cadre: { port: gateway.port, proc: gateway.child }, fixed_json: { port: fixedPort, proc: fixed }, route_redis: { port: routeRedisPort, proc: routeRedis },
  };
  // Warm every side up (JIT, connections, every agent's worker record).
  for (const s of Object.values(servers)) await send(s.port, Math.max(5_000, AGENTS * 4));

  const side = (name: string) => async (): Promise<Cost> => {
    const { port, proc } = servers[name]!;
    await readProbe(proc);
    const redisCpu = await stats.cpuSeconds();
    await stats.reset();
    const cpu = proc.cpuSeconds();
    await profiledWindow(`heartbeat cost ${name}`, () => send(port, REQUESTS));
    const cpuUs = ((proc.cpuSeconds() - cpu) * 1e6) / REQUESTS;
    const probe = await readProbe(proc);
    const out: Cost = {
      cpu_us: round(cpuUs, 1),
      alloc_kb: round(((probe.allocated_mb ?? NaN) * 1e6) / 1024 / REQUESTS, 2),
      gcs_per_1k: round((probe.gc.count * 1000) / REQUESTS, 2),
      gc_ms_per_1k: round((probe.gc.total_ms * 1000) / REQUESTS, 1),
      longest_gc_ms: probe.gc.max_ms,
    };
    if (name !== 'fixed_json') {
      out.redis_cpu_us = round((((await stats.cpuSeconds()) - redisCpu) * 1e6) / REQUESTS, 1);
      out.redis_commands = round(totalCalls(await stats.counts()) / REQUESTS, 2);
    }
    return out;
  };
  const samples = await alternate(ROUNDS, { cadre: side('cadre'), fixed_json: side('fixed_json'), route_redis: side('route_redis') });
  printTable(`Per heartbeat: ${REQUESTS} requests per sample, ${IN_FLIGHT} in flight, ${AGENTS} agents in ${WORKSPACES} workspaces`, [
    ['round', 'target', 'cpu µs', 'alloc KB', 'GCs /1k', 'GC ms /1k', 'longest GC ms', 'redis cpu µs', 'redis cmds', 'load (1/5/15 min)', 'box busy'],
    ...samples.map((s) => [s.round, s.side, s.cpu_us, s.alloc_kb, s.gcs_per_1k, s.gc_ms_per_1k, s.longest_gc_ms, s.redis_cpu_us ?? '-', s.redis_commands ?? '-', s.load.loadavg.join('/'), s.machine_busy]),
  ]);
  const of = (name: string, f: (c: Cost) => number): number[] => samples.filter((s) => s.side === name).map(f);
  for (const name of Object.keys(servers)) {
    console.log(`${name}: cpu ${range(of(name, (c) => c.cpu_us))} µs, alloc ${range(of(name, (c) => c.alloc_kb), 2)} KB, GCs ${range(of(name, (c) => c.gcs_per_1k), 2)} per 1k, per heartbeat`);
  }
  console.log(`${loadText()}; the gateway reached Redis over ${redis.unixSocket ? 'a Unix socket' : 'loopback TCP'}`);
} finally {
  agent.destroy();
  await fixed.stop();
  await routeRedis.stop();
  await gateway.stop();
  await stats.close();
  await redis.stop();
}

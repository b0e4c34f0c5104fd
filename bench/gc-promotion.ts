// What heartbeats leave for the gateway's old generation, in figures the machine's load does not move: bytes
// promoted out of the young generation per heartbeat and the full (mark-compact) GCs they cause, from V8's
// --trace-gc-nvp lines, over a fixed number of heartbeats after a warm-up (closed loop, a fixed number in flight,
// from this process). Gateway flags to try go in FLAGS, after the shipped ones (V8 takes the last of a flag).
// Not a bench: nothing is recorded, latency is not measured (heartbeat.bench.ts does that).
//
//   npm exec -- node bench/gc-promotion.ts                                          # 300,000 heartbeats, 200 in flight
//   FLAGS="--no-allocation-site-pretenuring" IN_FLIGHT=16 N=100000 npm exec -- node bench/gc-promotion.ts
import http from 'node:http';
import { spawnGateway, startPrivateRedis } from './support/harness.ts';

const RUNS_KEY = 'bench-runs-key';
const AGENTS = 200;
const N = Number(process.env.N ?? 300_000);
const IN_FLIGHT = Number(process.env.IN_FLIGHT ?? AGENTS);
const WARM_UP = 50_000;
const flags = (process.env.FLAGS ?? '').split(' ').filter(Boolean);

const redis = await startPrivateRedis();
const gateway = await spawnGateway(
  { REDIS_URL: redis.url, RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: 'bench-control-key', RUNS_MAX_ACTIVE_PER_WORKSPACE: '1000', RUNS_WORKER_TTL_MS: '60000' },
  ['--trace-gc-nvp', ...flags],
);
const gc = { measuring: false, scavenges: 0, promoted: 0, fullGcs: 0, fullGcPauseMs: 0 };
gateway.child.onLine((line) => {
  const kind = /\bgc=(\w+)/.exec(line)?.[1];
  if (!gc.measuring || !kind) return;
  if (kind === 's') {
    gc.scavenges++;
    gc.promoted += Number(/\bpromoted=(\d+)/.exec(line)?.[1] ?? 0);
  } else if (kind === 'mc' || kind === 'mmc') {
    gc.fullGcs++;
    gc.fullGcPauseMs += Number(/\bpause=([\d.]+)/.exec(line)?.[1] ?? 0);
  }
});

const agent = new http.Agent({ keepAlive: true, maxSockets: IN_FLIGHT });
const bodies = Array.from({ length: AGENTS }, (_, i) =>
  JSON.stringify({ workspace_id: `ws-${i % 20}`, worker_id: `agent-${i}`, vm_id: `vm-${i}`, status: 'ready', metadata: {}, acked_command_ids: [] }));
function heartbeat(body: string): Promise<void> {
  return new Promise((resolve) => {
    const req = http.request(
      { host: '127.0.0.1', port: gateway.port, path: '/api/runs/workers/heartbeat', method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-windie-runs-key': RUNS_KEY } },
      (res) => {
        res.resume();
        res.on('end', () => resolve());
      },
    );
    req.on('error', () => resolve());
    req.end(body);
  });
}
async function closedLoop(count: number): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
    while (next < count) await heartbeat(bodies[next++ % AGENTS]!);
  }));
}

try {
  await closedLoop(WARM_UP);
  gc.measuring = true;
  await closedLoop(N);
  gc.measuring = false;
  console.log(JSON.stringify({
    flags, heartbeats: N, in_flight: IN_FLIGHT, scavenges: gc.scavenges, promoted_bytes_per_heartbeat: Math.round((gc.promoted / N) * 10) / 10,
    full_gcs: gc.fullGcs, full_gc_pause_ms: Math.round(gc.fullGcPauseMs),
  }));
} finally {
  agent.destroy();
  await gateway.stop();
  await redis.stop();
}

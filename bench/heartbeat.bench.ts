// Heartbeats of 200 simulated VM agents against the real gateway (one Lua script per heartbeat), side by side
// with a bare Fastify route answering fixed JSON, on the same machine in the same run; then the latency at half
// the gateway's throughput, and how long stop-all takes over 1,000 active runs.
//   npm exec -- node bench/heartbeat.bench.ts
import { spawn } from 'node:child_process';
import http from 'node:http';
import { summarize } from './support/latency.ts';
import { REPO, spawnGateway, startPrivateRedis } from './support/harness.ts';
import { printTable, note, saveResults } from './support/report.ts';
import { round } from './support/redis-stats.ts';

const AGENTS = 200;
const WORKSPACES = 20;
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const RUNS_KEY = 'bench-runs-key';
const CONTROL_KEY = 'bench-control-key';

const agent = new http.Agent({ keepAlive: true, maxSockets: AGENTS });

function post(port: number, path: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, path, method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), 'x-windie-runs-key': RUNS_KEY, ...headers } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

const heartbeat = (i: number) => ({ workspace_id: `ws-${i % WORKSPACES}`, worker_id: `agent-${i}`, vm_id: `vm-${i}`, status: 'ready', metadata: {}, acked_command_ids: [] });

/** Each agent beats back to back for `seconds`: the server's capacity with 200 concurrent clients. */
async function closedLoop(port: number, seconds: number): Promise<{ rate: number; errors: number }> {
  const end = performance.now() + seconds * 1000;
  let done = 0;
  let errors = 0;
  await Promise.all(
    Array.from({ length: AGENTS }, async (_, i) => {
      while (performance.now() < end) {
        const res = await post(port, '/api/runs/workers/heartbeat', heartbeat(i));
        if (res.status === 200) done++;
        else errors++;
      }
    }),
  );
  return { rate: done / seconds, errors };
}

/** Heartbeats at a fixed total rate spread over the agents; returns latency percentiles. */
async function openLoop(port: number, perSecond: number, seconds: number) {
  const count = Math.floor(perSecond * seconds);
  const samples = new Float64Array(count).fill(NaN);
  const pending: Promise<void>[] = [];
  const start = performance.now();
  for (let i = 0; i < count; i++) {
    const due = start + (i * 1000) / perSecond;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    const t0 = performance.now();
    pending.push(post(port, '/api/runs/workers/heartbeat', heartbeat(i % AGENTS)).then((res) => {
      if (res.status === 200) samples[i] = performance.now() - t0;
    }));
  }
  await Promise.all(pending);
  return summarize(samples);
}

async function spawnFixedJson(): Promise<{ port: number; stop(): void }> {
  const child = spawn(process.execPath, ['bench/support/fixed-json-server.ts'], { cwd: REPO, stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve) => child.stdout!.on('data', (c: Buffer) => {
    const m = /listening (\d+)/.exec(c.toString());
    if (m) resolve(Number(m[1]));
  }));
  return { port, stop: () => child.kill('SIGTERM') };
}

const redis = await startPrivateRedis();
const gateway = await spawnGateway({ REDIS_URL: redis.url, RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: CONTROL_KEY, RUNS_MAX_ACTIVE_PER_WORKSPACE: '1000', RUNS_WORKER_TTL_MS: '60000' });
const fixed = await spawnFixedJson();
try {
  // Warm both up (JIT, connections), then measure each in turn.
  await closedLoop(gateway.port, 1);
  await closedLoop(fixed.port, 1);
  const cadre = await closedLoop(gateway.port, SECONDS);
  const baseline = await closedLoop(fixed.port, SECONDS);
  const halfRate = Math.floor(cadre.rate / 2);
  const latency = await openLoop(gateway.port, halfRate, SECONDS);
  const baselineLatency = await openLoop(fixed.port, halfRate, SECONDS);

  // stop-all over 1,000 active runs in 10 workspaces, a tenth of them bound to a worker.
  const runIds: string[] = [];
  for (let i = 0; i < 1000; i++) {
    const res = await post(gateway.port, '/api/runs/', { workspace_id: `stop-${i % 10}`, query: `run ${i}` });
    if (res.status !== 200) throw new Error(`create run: ${res.status} ${res.text}`);
    runIds.push((JSON.parse(res.text) as { run: { run_id: string } }).run.run_id);
  }
  for (let i = 0; i < 100; i++) await post(gateway.port, '/api/runs/workers/heartbeat', { workspace_id: `stop-${i % 10}`, worker_id: `binder-${i}`, status: 'ready' });
  const t0 = performance.now();
  const stop = await post(gateway.port, '/api/runs/stop-all', { requested_by: 'bench' }, { 'x-windie-runs-control-key': CONTROL_KEY });
  const stopMs = performance.now() - t0;
  const stopped = (JSON.parse(stop.text) as { count: number }).count;

  printTable(`Heartbeats: ${AGENTS} agents in ${WORKSPACES} workspaces, ${SECONDS} s each (closed loop, keep-alive HTTP/1.1)`, [
    ['target', 'heartbeats/s', 'errors'],
    ['Cadre gateway (1 Lua script each)', round(cadre.rate), cadre.errors],
    ['bare Fastify, fixed JSON', round(baseline.rate), baseline.errors],
  ]);
  note(`ratio: ${round(cadre.rate / baseline.rate, 2)}x of the fixed-JSON route (goal >= 0.5x)`);
  printTable(`Latency at ${halfRate} heartbeats/s (half the gateway's throughput), open loop`, [
    ['target', 'p50 ms', 'p99 ms', 'max ms', 'missing'],
    ['Cadre gateway', latency.p50_ms, latency.p99_ms, latency.max_ms, latency.missing],
    ['bare Fastify, fixed JSON', baselineLatency.p50_ms, baselineLatency.p99_ms, baselineLatency.max_ms, baselineLatency.missing],
  ]);
  note(`stop-all of ${stopped} active runs (100 bound to workers): ${round(stopMs)} ms (goal: answers within 1 s)`);
  saveResults('heartbeat', {
    agents: AGENTS,
    seconds: SECONDS,
    cadre_heartbeats_per_s: round(cadre.rate),
    fixed_json_per_s: round(baseline.rate),
    ratio: round(cadre.rate / baseline.rate, 2),
    half_rate: halfRate,
    latency_at_half_rate: latency,
    fixed_json_latency_at_same_rate: baselineLatency,
    stop_all: { runs: stopped, ms: round(stopMs) },
  });
} finally {
  fixed.stop();
  await gateway.stop();
  await redis.stop();
  agent.destroy();
}

// Load generator for heartbeat.bench.ts, in a process of its own: simulated VM agents posting heartbeats over
// keep-alive HTTP/1.1. Commands (stdin): {cmd:'closed', port, seconds} → every agent beats back to back;
// {cmd:'open', port, rate, seconds} → heartbeats at a fixed total rate, latency per request. Its own event-loop
// delay is reported too: the floor under any latency it measures.
import http from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { summarize } from '../support/latency.ts';
import { argJson, commands, emit, ownCpuSeconds } from '../support/child.ts';

const { agents, workspaces, runsKey } = argJson<{ agents: number; workspaces: number; runsKey: string }>();
const agent = new http.Agent({ keepAlive: true, maxSockets: agents });

/** The status, or 0 when the request failed (e.g. a keep-alive socket the server closed): counted as an error. */
function post(port: number, body: string): Promise<number> {
  return new Promise((resolve) => {
    const req = http.request(
      { host: '127.0.0.1', port, path: '/api/runs/workers/heartbeat', method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-windie-runs-key': runsKey } },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', () => resolve(0));
    req.end(body);
  });
}

const bodies = Array.from({ length: agents }, (_, i) =>
  JSON.stringify({ workspace_id: `ws-${i % workspaces}`, worker_id: `agent-${i}`, vm_id: `vm-${i}`, status: 'ready', metadata: {}, acked_command_ids: [] }));

async function closedLoop(port: number, seconds: number) {
  const end = performance.now() + seconds * 1000;
  let done = 0;
  let errors = 0;
  await Promise.all(bodies.map(async (body) => {
    while (performance.now() < end) {
      if ((await post(port, body)) === 200) done++;
      else errors++;
    }
  }));
  return { rate: Math.round(done / seconds), errors };
}

async function openLoop(port: number, perSecond: number, seconds: number) {
  const count = Math.floor(perSecond * seconds);
  const samples = new Float64Array(count).fill(NaN);
  const pending: Promise<void>[] = [];
  let errors = 0;
  const start = performance.now();
  for (let i = 0; i < count; i++) {
    const wait = start + (i * 1000) / perSecond - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    const t0 = performance.now();
    pending.push(post(port, bodies[i % agents]!).then((status) => {
      if (status === 200) samples[i] = performance.now() - t0;
      else errors++;
    }));
  }
  await Promise.all(pending);
  return { latency: summarize(samples), errors, achieved: Math.round(count / ((performance.now() - start) / 1000)) };
}

const delay = monitorEventLoopDelay({ resolution: 5 });
delay.enable();
emit('ready');
for await (const c of commands<{ cmd: 'closed' | 'open' | 'exit'; port: number; seconds: number; rate?: number }>()) {
  if (c.cmd === 'exit') break;
  delay.reset();
  const cpu = ownCpuSeconds();
  const figures = c.cmd === 'closed' ? await closedLoop(c.port, c.seconds) : await openLoop(c.port, c.rate!, c.seconds);
  emit(c.cmd, { ...figures, client_cpu_s: Math.round((ownCpuSeconds() - cpu) * 100) / 100, client_loop_delay_p99_ms: Math.round(delay.percentile(99) / 1e4) / 100 });
}
agent.destroy();

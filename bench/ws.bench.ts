// 1,000 concurrent /ws sessions on one gateway against the same load over StreamSession: every client opens its
// session (a socket with its handshake / a StreamSession call with its start), then each sends one message and
// reads the streamed answer to its end; the worker pool runs 100 turns at a time, so most sessions wait with their
// connection open. Measured: the gateway's RSS (VmRSS sampled every 200 ms: the peak over the sample) and each
// model chunk's lag as streaming.bench.ts defines it. Clients: bench/load/stream-client.ts (mode ws / cadre) in a
// process of its own; gateway, worker pool and scripted model too. Rounds alternate ws, stream.
//
//   npm exec -- node bench/ws.bench.ts     (BENCH_ROUNDS=3, BENCH_SESSIONS=1000)
import { BENCH_API_KEY } from './support/harness.ts';
import { summarize, type LatencySummary } from './support/latency.ts';
import { loadText } from './support/machine.ts';
import { base64ToF64 } from './support/child.ts';
import { spawnNode, type Message } from './support/procs.ts';
import { note, printTable, progress, saveResults } from './support/report.ts';
import { alternate, range } from './support/rounds.ts';
import { startStack } from './support/stack.ts';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 1000);
const CHUNK_DELAY_MS = 20;
const PROMPT = `Stream a paragraph [[scripted:words=30]] [[scripted:chunk_delay=${CHUNK_DELAY_MS}]]`;

interface Figures {
  sessions: number;
  seconds: number;
  gateway_rss_peak_mb: number;
  first_delta: LatencySummary;
  chunk_lag: LatencySummary;
}

async function main(): Promise<void> {
  // A worker without the probe: nothing here reads its event loop or GC.
  const stack = await startStack({ worker: { nodeArgs: [], env: { WORKER_CONCURRENCY: '100' } } });
  const { gateway } = stack;
  const clients = {
    ws: spawnNode('bench/load/stream-client.ts', { args: [JSON.stringify({ mode: 'ws', target: gateway.target })] }),
    stream: spawnNode('bench/load/stream-client.ts', { args: [JSON.stringify({ mode: 'cadre', target: gateway.target })], env: { CADRE_API_KEY: BENCH_API_KEY } }),
  };
  const run = async (side: keyof typeof clients, sessions: number): Promise<Figures> => {
    let peak = gateway.rss().rssMb;
    const sampler = setInterval(() => (peak = Math.max(peak, gateway.rss().rssMb)), 200);
    clients[side].send({ cmd: 'run', sessions, turns: 1, prompt: PROMPT, chunkDelayMs: CHUNK_DELAY_MS });
    const done = await clients[side].next<Message & { first: string; lags: string; seconds: number }>('done', 300_000);
    clearInterval(sampler);
    return { sessions, seconds: done.seconds, gateway_rss_peak_mb: Math.round(peak), first_delta: summarize(base64ToF64(done.first)), chunk_lag: summarize(base64ToF64(done.lags)) };
  };
  try {
    await run('stream', 1); // warm-up (and waits out the worker pool's start)
    await run('ws', 1);
    progress(`${SESSIONS} sessions per side`);
    const samples = await alternate(ROUNDS, { ws: () => run('ws', SESSIONS), stream: () => run('stream', SESSIONS) });
    printTable(`${SESSIONS} concurrent sessions on one gateway: /ws vs StreamSession (one streamed answer each, 100 turns at a time)`, [
      ['side', 'round', 'seconds', 'gateway RSS peak MB', 'first delta p50', 'p99', 'chunk lag p50', 'p99', 'load'],
      ...samples.map((s) => [s.side, s.round, s.seconds, s.gateway_rss_peak_mb, s.first_delta.p50_ms, s.first_delta.p99_ms, s.chunk_lag.p50_ms, s.chunk_lag.p99_ms, s.load.loadavg[0]!]),
    ]);
    const of = (side: string) => samples.filter((s) => s.side === side);
    note(`RSS peak /ws ${range(of('ws').map((s) => s.gateway_rss_peak_mb), 0)} MB vs StreamSession ${range(of('stream').map((s) => s.gateway_rss_peak_mb), 0)} MB; chunk lag p99 /ws ${range(of('ws').map((s) => s.chunk_lag.p99_ms))} ms vs ${range(of('stream').map((s) => s.chunk_lag.p99_ms))} ms; ${loadText()}`);
    saveResults('ws', { sessions: SESSIONS, prompt: PROMPT, samples });
  } finally {
    for (const c of Object.values(clients)) c.send({ cmd: 'stop' });
    await Promise.all(Object.values(clients).map((c) => c.exited));
    await stack.stop();
  }
}

await main();

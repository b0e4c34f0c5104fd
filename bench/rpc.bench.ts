// cadre rpc latency: a prompt written to `cadre rpc`'s stdin → its first session event line (agent_start) and its
// first text delta (message_update), against a StreamSession client's first TextDelta on the same gateway, for
// the same scripted answer. `cadre rpc` is a child process driven over stdin/stdout as an editor would; the
// StreamSession client is bench/load/stream-client.ts; gateway, worker pool and scripted model are processes of
// their own. Rounds alternate rpc, stream.
//
//   npm exec -- node bench/rpc.bench.ts     (BENCH_ROUNDS=3, BENCH_PROMPTS=20)
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { BENCH_API_KEY, REPO } from './support/harness.ts';
import { summarize, type LatencySummary } from './support/latency.ts';
import { loadText } from './support/machine.ts';
import { base64ToF64 } from './support/child.ts';
import { spawnNode, type Message } from './support/procs.ts';
import { note, printTable, saveResults } from './support/report.ts';
import { alternate, range } from './support/rounds.ts';
import { startStack } from './support/stack.ts';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const PROMPTS = Number(process.env.BENCH_PROMPTS ?? 20);
const PROMPT = 'Answer briefly [[scripted:words=12]]';

interface Figures {
  first_event?: LatencySummary;
  first_delta: LatencySummary;
}

/** PROMPTS prompts through one started `cadre rpc` process with its session, one after another (each waits for its agent_end). */
async function viaRpc(url: string): Promise<Figures> {
  const child = spawn(process.execPath, ['apps/cli/src/main.ts', 'rpc'], {
    cwd: REPO, env: { PATH: process.env.PATH ?? '', CADRE_URL: url, CADRE_API_KEY: BENCH_API_KEY }, stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout });
  let onLine: (line: Record<string, unknown>, at: number) => void = () => undefined;
  lines.on('line', (l) => onLine(JSON.parse(l) as Record<string, unknown>, performance.now()));
  // Started and holding its session before the clock runs: new_session answers once the session exists.
  await new Promise<void>((resolve) => {
    onLine = (line) => line.type === 'response' && line.command === 'new_session' && resolve();
    child.stdin.write(`${JSON.stringify({ type: 'new_session' })}\n`);
  });
  const firstEvent = new Float64Array(PROMPTS);
  const firstDelta = new Float64Array(PROMPTS);
  for (let i = 0; i < PROMPTS; i++) {
    await new Promise<void>((resolve) => {
      let t0 = 0;
      firstEvent[i] = NaN;
      firstDelta[i] = NaN;
      onLine = (line, at) => {
        if (line.type === 'agent_start' && Number.isNaN(firstEvent[i])) firstEvent[i] = at - t0;
        if (line.type === 'message_update' && Number.isNaN(firstDelta[i])) firstDelta[i] = at - t0;
        if (line.type === 'agent_end') resolve();
      };
      t0 = performance.now();
      child.stdin.write(`${JSON.stringify({ id: String(i), type: 'prompt', message: PROMPT })}\n`);
    });
  }
  child.stdin.end();
  await new Promise((resolve) => child.once('exit', resolve));
  return { first_event: summarize(firstEvent), first_delta: summarize(firstDelta) };
}

async function main(): Promise<void> {
  // A worker without the probe: nothing here reads its event loop or GC.
  const stack = await startStack({ worker: { nodeArgs: [] } });
  const { gateway } = stack;
  const stream = spawnNode('bench/load/stream-client.ts', { args: [JSON.stringify({ mode: 'cadre', target: gateway.target })] });
  const viaStream = async (): Promise<Figures> => {
    stream.send({ cmd: 'run', sessions: 1, turns: PROMPTS, prompt: PROMPT, chunkDelayMs: 0 });
    const done = await stream.next<Message & { first: string }>('done', 120_000);
    return { first_delta: summarize(base64ToF64(done.first)) };
  };
  try {
    await viaStream(); // warm-up (and waits out the worker pool's start)
    await viaRpc(gateway.url);
    const samples = await alternate(ROUNDS, { rpc: () => viaRpc(gateway.url), stream: viaStream });
    printTable(`cadre rpc vs StreamSession: prompt → first event / first text delta (${PROMPTS} prompts per sample, one at a time)`, [
      ['side', 'round', 'first event p50', 'p99', 'first delta p50', 'p99', 'load'],
      ...samples.map((s) => [s.side, s.round, s.first_event?.p50_ms ?? '—', s.first_event?.p99_ms ?? '—', s.first_delta.p50_ms, s.first_delta.p99_ms, s.load.loadavg[0]!]),
    ]);
    const added = Array.from({ length: ROUNDS }, (_, i) => {
      const r = samples.find((s) => s.side === 'rpc' && s.round === i + 1)!;
      const g = samples.find((s) => s.side === 'stream' && s.round === i + 1)!;
      return r.first_delta.p50_ms - g.first_delta.p50_ms;
    });
    note(`cadre rpc adds ${range(added)} ms to the first text delta at p50 (it follows the session's SSE stream); ${loadText()}`);
    saveResults('rpc', { prompt: PROMPT, prompts: PROMPTS, samples, added_first_delta_p50_ms: added });
  } finally {
    stream.send({ cmd: 'stop' });
    await stream.exited;
    await stack.stop();
  }
}

await main();

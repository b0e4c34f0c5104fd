// Streaming overhead: the same scripted model stream seen by a StreamSession client (gateway → BullMQ → worker →
// `openai` → coalesced log writes → fan-out → gRPC) against the stream read directly with the `openai` package,
// at 1 and at 100 concurrent sessions. Per turn: the first text delta after the message was sent, and each model
// chunk's lag (its arrival minus the time the model's chunk_delay pacing scheduled it at; a chunk held back by
// delta coalescing shows its wait), and — the start-up left out — each later chunk's relay lag: its arrival after the
// turn's first delta minus the pacing since then (what a delta waits in transit once the stream has begun; the first
// delta's wait is the first-delta figure). Redis commands and scripts per Cadre turn come from INFO commandstats of the
// gateway's own redis-server; CPU time per Cadre turn of the gateway, the worker and that Redis from /proc (the
// figures load moves least), and per turn of either side the scripted model's and the client's, with the share of
// the machine's CPUs busy during the round (at 1, every process on the path waits for a CPU). At 100 sessions two loads: the messages sent at once (a burst, every turn starting
// together) and arrivals spread over a turn's length (about 100 turns streaming at any time). Gateway, worker pool,
// scripted model and both clients (bench/load/stream-client.ts) are processes of their own; rounds alternate raw, cadre. Each Cadre round's first deltas are split into steps
// (client send → the BullMQ add, the job's wait in the queue, taken → model request, model → commit, commit →
// client) and each burst's start spread, from the job records and session logs in Redis (support/turn-split.ts).
//
//   npm exec -- node bench/streaming.bench.ts     (BENCH_ROUNDS=3; BENCH_LEVELS=1,100,100~: 100~ spreads the arrivals)
//   BENCH_GATEWAY_FLAGS="" npm exec -- node bench/streaming.bench.ts   # the gateway without its shipped V8 flags (an experiment)
//   BENCH_CHUNK_DELAY_MS=100 npm exec -- node bench/streaming.bench.ts # the model's chunks further apart: the same turns at
//     a fifth of the CPU rate, to tell a saturated machine from the path's own latency (an experiment, out of the ranges)
import { Redis } from 'ioredis';
import { BENCH_API_KEY, profiledWindow } from './support/harness.ts';
import { summarize, type LatencySummary } from './support/latency.ts';
import { loadText, machineBusyMark } from './support/machine.ts';
import { base64ToF64 } from './support/child.ts';
import { cpuSecondsOf, spawnNode, type Message } from './support/procs.ts';
import { RedisStats, round, scriptTotal, totalCalls } from './support/redis-stats.ts';
import { note, printTable, progress, saveResults } from './support/report.ts';
import { alternate, median, range, type Sample } from './support/rounds.ts';
import { startStack } from './support/stack.ts';
import { splitFirstDeltas, type TurnSplit, type TurnStamp } from './support/turn-split.ts';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
// A level is N sessions sending their messages at once (a burst: every session's turn starts together), or with a
// trailing `~` N sessions whose arrivals are spread over one turn's length (steady load: about N turns stream at any
// time, each starting while the others stream, as N people each holding a conversation).
const LEVELS = (process.env.BENCH_LEVELS ?? '1,100,100~').split(',').map((l) => ({ label: l, sessions: Number(l.replace('~', '')), spread: l.endsWith('~') }));
// The goal's stream: a chunk every 20 ms. Another pacing is an experiment (summary.ts leaves it out of the ranges).
const GOAL_CHUNK_DELAY_MS = 20;
const CHUNK_DELAY_MS = Number(process.env.BENCH_CHUNK_DELAY_MS ?? GOAL_CHUNK_DELAY_MS);
// 60 filler words after the quote: ~23 chunks of three words, one every 20 ms (~0.45 s of streaming per turn).
const PROMPT = `Stream a paragraph [[scripted:words=60]] [[scripted:chunk_delay=${CHUNK_DELAY_MS}]]`;
const TURNS: Record<number, number> = { 1: 20 };
// Spread arrivals: one ramp turn per session (not recorded), then two at full concurrency.
const SPREAD_TURNS = 3;
// The scripted stream's length (~23 chunks): the window a level's arrivals are spread over.
const TURN_MS = 23 * CHUNK_DELAY_MS;
const PREFIX = 'cadre';

interface Figures {
  sessions: number;
  /** How the sessions' messages arrive: all at once, or spread over a turn's length (the `~` levels). */
  arrivals: 'burst' | 'spread';
  turns: number;
  first_delta: LatencySummary;
  chunk_lag: LatencySummary;
  /** Chunks after a turn's first delta: their lag after it (see stream-client.ts, TurnLags). */
  relay_lag: LatencySummary;
  deltas_per_turn: number;
  redis_commands_per_turn?: number;
  redis_scripts_per_turn?: number;
  /** CPU time (user + system, from /proc) per Cadre turn of each process on its path: load moves it far less than latency. */
  cpu_ms_per_turn?: { gateway: number; worker: number; redis: number };
  /** CPU time per turn of the scripted model and of the side's own client (both sides have them). */
  cpu_ms_per_turn_model_client: { model: number; client: number };
  /** Share of the machine's CPUs busy during the round (/proc/stat): near 1, everything on it waits for a CPU. */
  box_busy: number;
  /** Cadre only: the first delta's steps and the bursts' spread, read from Redis after the round. */
  first_delta_split?: TurnSplit;
}

async function main(): Promise<void> {
  const stack = await startStack({ keyPrefix: PREFIX, worker: { env: { WORKER_CONCURRENCY: String(Math.max(...LEVELS.map((l) => l.sessions))) } } });
  const { redis, modelUrl, gateway, worker, model } = stack;
  const raw = spawnNode('bench/load/stream-client.ts', { args: [JSON.stringify({ mode: 'raw', modelUrl })] });
  const cadre = spawnNode('bench/load/stream-client.ts', { args: [JSON.stringify({ mode: 'cadre', target: gateway.target })], env: { CADRE_API_KEY: BENCH_API_KEY } });
  const stats = new RedisStats(redis.url);
  const reader = new Redis(redis.url, { connectionName: 'bench-turn-split', maxRetriesPerRequest: 1 });
  try {
    const run = async (side: typeof raw, { sessions, spread }: { sessions: number; spread: boolean }, withRedis: boolean): Promise<Figures> => {
      const turns = spread ? SPREAD_TURNS : (TURNS[sessions] ?? 2);
      if (withRedis) await stats.reset();
      const cpu = (): number[] => [gateway.child.cpuSeconds(), worker.cpuSeconds(), cpuSecondsOf(redis.pid)];
      const cpuBefore = cpu();
      const ownBefore = [model.cpuSeconds(), side.cpuSeconds()];
      const busy = machineBusyMark();
      const done = await profiledWindow(`streaming ${withRedis ? 'cadre' : 'raw'} ${sessions}`, () => {
        side.send({ cmd: 'run', sessions, turns, prompt: PROMPT, chunkDelayMs: CHUNK_DELAY_MS, ...(spread && { spreadMs: TURN_MS }) });
        return side.next<Message & { first: string; lags: string; relay_lags: string; turns: number; turns_run: number; deltas: number; stamps?: TurnStamp[] }>('done', 120_000);
      });
      // Per turn run (the spread levels' unrecorded ramp turns included): the CPU and Redis counts cover them all.
      const cpuUsed = cpu().map((s, i) => round(((s - cpuBefore[i]!) * 1000) / done.turns_run, 2));
      const boxBusy = busy();
      const [modelCpu, clientCpu] = [model.cpuSeconds(), side.cpuSeconds()].map((s, i) => round(((s - ownBefore[i]!) * 1000) / done.turns_run, 2));
      const first = base64ToF64(done.first);
      const figures: Figures = {
        sessions, arrivals: spread ? 'spread' : 'burst', turns: done.turns, first_delta: summarize(first), chunk_lag: summarize(base64ToF64(done.lags)),
        relay_lag: summarize(base64ToF64(done.relay_lags)), deltas_per_turn: round(done.deltas / done.turns, 1),
        cpu_ms_per_turn_model_client: { model: modelCpu!, client: clientCpu! }, box_busy: boxBusy,
      };
      if (withRedis) {
        const calls = await stats.counts();
        figures.redis_commands_per_turn = round(totalCalls(calls) / done.turns_run, 1);
        figures.redis_scripts_per_turn = round(scriptTotal(calls) / done.turns_run, 1);
        figures.cpu_ms_per_turn = { gateway: cpuUsed[0]!, worker: cpuUsed[1]!, redis: cpuUsed[2]! };
      }
      // Read after the counts and CPU above, so the reads are not in them.
      if (withRedis && done.stamps) figures.first_delta_split = await splitFirstDeltas(reader, PREFIX, done.stamps);
      return figures;
    };
    // One warm-up run per side (module caches, connections, JIT; the worker pool's start-up).
    const single = { sessions: 1, spread: false };
    await run(raw, single, false);
    await run(cadre, single, false);
    const samples: Sample<Figures>[] = [];
    for (const level of LEVELS) {
      progress(`${level.sessions} concurrent session(s), ${level.spread ? 'arrivals spread' : 'sent at once'}`);
      samples.push(...(await alternate(ROUNDS, { raw: () => run(raw, level, false), cadre: () => run(cadre, level, true) })));
    }
    const levelOf = (s: Figures): string => `${s.sessions}${s.arrivals === 'spread' ? '~' : ''}`;
    const rows: (string | number)[][] = [['sessions', 'side', 'round', 'first delta p50', 'p99', 'chunk lag p50', 'p99', 'relay lag p50', 'p99', 'deltas/turn', 'redis cmds/turn', 'scripts/turn', 'cpu ms/turn gw', 'worker', 'redis', 'model', 'client', 'box busy', 'load']];
    for (const s of samples) {
      rows.push([levelOf(s), s.side, s.round, s.first_delta.p50_ms, s.first_delta.p99_ms, s.chunk_lag.p50_ms, s.chunk_lag.p99_ms, s.relay_lag.p50_ms, s.relay_lag.p99_ms, s.deltas_per_turn, s.redis_commands_per_turn ?? '—', s.redis_scripts_per_turn ?? '—', s.cpu_ms_per_turn?.gateway ?? '—', s.cpu_ms_per_turn?.worker ?? '—', s.cpu_ms_per_turn?.redis ?? '—', s.cpu_ms_per_turn_model_client.model, s.cpu_ms_per_turn_model_client.client, s.box_busy, s.load.loadavg[0]!]);
    }
    printTable(`Streaming: StreamSession vs the same stream read with openai (${PROMPT.length} chars, chunk_delay ${CHUNK_DELAY_MS} ms; N~: arrivals spread over ${TURN_MS} ms, first turns not recorded)`, rows);
    const added: Record<string, unknown> = {};
    for (const { label } of LEVELS) {
      const pairs = Array.from({ length: ROUNDS }, (_, i) => {
        const r = samples.find((s) => levelOf(s) === label && s.round === i + 1 && s.side === 'raw')!;
        const c = samples.find((s) => levelOf(s) === label && s.round === i + 1 && s.side === 'cadre')!;
        return { first_p50: c.first_delta.p50_ms - r.first_delta.p50_ms, lag_p99: c.chunk_lag.p99_ms - r.chunk_lag.p99_ms, relay_p99: c.relay_lag.p99_ms - r.relay_lag.p99_ms };
      });
      added[`at_${label.replace('~', '_spread')}`] = pairs;
      note(`${label} session(s): added first-delta p50 ${range(pairs.map((p) => p.first_p50))} ms (goal ≤ 5), added chunk-lag p99 ${range(pairs.map((p) => p.lag_p99))} ms (goal ≤ 10 at 100); median ${round(median(pairs.map((p) => p.first_p50)), 1)} / ${round(median(pairs.map((p) => p.lag_p99)), 1)}`);
      note(`  per delta after the first (relay lag, the start-up left out): added p99 ${range(pairs.map((p) => p.relay_p99))} ms; median ${round(median(pairs.map((p) => p.relay_p99)), 1)}`);
    }
    const split = samples.filter((s) => s.first_delta_split);
    const rawOf = (c: Sample<Figures>): Sample<Figures> => samples.find((s) => s.side === 'raw' && levelOf(s) === levelOf(c) && s.round === c.round)!;
    printTable('Cadre first delta by step (ms, p50 | p99; job records and session log in Redis, ±1 ms each) and the first turns\' burst (last − first)', [
      ['sessions', 'round', 'turns', 'send → add', 'queue wait', 'taken → model request', 'model → commit', 'raw first delta', 'commit → client', 'add spread', 'start spread', 'load'],
      ...split.map((s) => {
        const f = s.first_delta_split!;
        const st = (k: keyof TurnSplit['steps']): string => `${f.steps[k].p50_ms} | ${f.steps[k].p99_ms}`;
        // Every session sends its first message at once: those turns are one burst (later ones drift apart).
        const spread = (k: 'add_spread_ms' | 'start_spread_ms'): string | number => (s.sessions > 1 && s.arrivals === 'burst' ? f.bursts[0]?.[k] ?? '—' : '—');
        const raw = rawOf(s).first_delta;
        return [levelOf(s), s.round, `${f.turns}${f.missing ? ` (${f.missing} missing)` : ''}`, st('to_add'), st('queue_wait'), st('to_model'), st('model_to_commit'), `${raw.p50_ms} | ${raw.p99_ms}`, st('commit_to_client'), spread('add_spread_ms'), spread('start_spread_ms'), s.load.loadavg[0]!];
      }),
    ]);
    for (const { label, sessions, spread } of LEVELS) {
      const of = split.filter((s) => levelOf(s) === label).map((s) => s.first_delta_split!);
      if (!of.length) continue;
      const wait = (k: 'p50_ms' | 'p99_ms'): string => range(of.map((f) => f.steps.queue_wait[k]));
      const starts = of.map((f) => f.bursts[0]?.start_spread_ms ?? NaN);
      note(`${label} session(s): queue wait p50 ${wait('p50_ms')} ms, p99 ${wait('p99_ms')} ms${sessions > 1 && !spread ? `; first burst's start spread (last processedOn − first) ${range(starts, 0)} ms` : ''}`);
    }
    note(loadText());
    saveResults('streaming', { prompt: PROMPT, chunk_delay_ms: CHUNK_DELAY_MS, ...(CHUNK_DELAY_MS !== GOAL_CHUNK_DELAY_MS && { pacing_experiment: true }), samples, added });
  } finally {
    raw.send({ cmd: 'stop' });
    cadre.send({ cmd: 'stop' });
    await Promise.all([raw.exited, cadre.exited]);
    await stats.close();
    reader.disconnect();
    await stack.stop();
  }
}

await main();

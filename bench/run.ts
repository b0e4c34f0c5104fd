// `npm run bench`: every bench, one after another, each in its own child process (so one's heap, sockets and
// timers cannot colour the next), then the headline figures side by side. Figures, never pass/fail: the exit
// code says only whether every bench ran.
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { printTable, RESULTS_FILE, type Cell, type ResultsFile } from './support/report.ts';

const BENCHES = ['fanout', 'overhead', 'memory', 'heartbeat'] as const;
const here = (file: string): string => fileURLToPath(new URL(file, import.meta.url));

rmSync(RESULTS_FILE, { force: true });
const failed: string[] = [];
for (const name of BENCHES) {
  console.log(`\n=== ${name}`);
  const started = performance.now();
  const run = spawnSync(process.execPath, [here(`./${name}.bench.ts`)], { stdio: 'inherit', timeout: 120_000 });
  console.log(`=== ${name}: ${((performance.now() - started) / 1000).toFixed(1)} s${run.status === 0 ? '' : ` (FAILED: ${run.error?.message ?? `exit ${run.status ?? run.signal}`})`}`);
  if (run.status !== 0) failed.push(name);
}

let results: ResultsFile | undefined;
try {
  results = JSON.parse(readFileSync(RESULTS_FILE, 'utf8')) as ResultsFile;
} catch {
  results = undefined;
}
// The shapes each bench writes (see its saveResults call); only what the summary reads.
type Latency = { p99_ms: number };
type FanoutPhase = { mode: string; readers: number; rate_target: number; latency: Latency; closed_early: number; stream_reads: number };
const fanout = results?.benches.fanout as { phases: FanoutPhase[]; ratios: Record<string, number> } | undefined;
const overhead = results?.benches.overhead as
  | { cadre: { tasks_per_s: number; commands_per_task: number }; raw_bullmq: { tasks_per_s: number; commands_per_task: number }; ratio_throughput: number }
  | undefined;
const memory = results?.benches.memory as { rss_holding_mb: number; streams: number; stalled: { status: string; rss_before_mb: number; rss_peak_mb: number } } | undefined;

const heartbeat = results?.benches.heartbeat as { cadre_heartbeats_per_s: number; fixed_json_per_s: number; ratio: number } | undefined;

const rows: Cell[][] = [['claim ("Speed" sections)', 'goal', 'cadre', 'baseline', 'ratio']];
const phase = (mode: string, readers: number, rate = 1000): FanoutPhase | undefined =>
  fanout?.phases.find((p) => p.mode === mode && p.readers === readers && p.rate_target === rate);
const c100 = phase('cadre', 100);
const r100 = phase('raw', 100);
if (c100 && r100 && fanout) {
  rows.push(['fan-out p99, 100 watchers × 1,000 ev/s (ms)', '≤ 10', c100.latency.p99_ms, r100.latency.p99_ms, fanout.ratios.p99_cadre_over_raw_at_100!]);
  rows.push(['  watchers closed early (RESOURCE_EXHAUSTED)', '0', c100.closed_early, '-', '-']);
  rows.push(['stream reads, 100 vs 1 watcher (×)', '≈ 1', fanout.ratios.cadre_reads_100_over_1!, fanout.ratios.raw_reads_100_over_1!, '-']);
}
if (overhead) {
  rows.push(['one-worker tasks/s vs raw BullMQ flow', '≥ 0.5×', overhead.cadre.tasks_per_s, overhead.raw_bullmq.tasks_per_s, overhead.ratio_throughput]);
  rows.push(['Redis commands per task', 'report', overhead.cadre.commands_per_task, overhead.raw_bullmq.commands_per_task, Math.round((overhead.cadre.commands_per_task / overhead.raw_bullmq.commands_per_task) * 10) / 10]);
}
if (memory) {
  rows.push([`gateway RSS with ${memory.streams} WatchTeam streams (MB)`, '< 256', memory.rss_holding_mb, '-', '-']);
  rows.push(['stalled watcher burst: RSS before → peak (MB)', 'bounded', `${memory.stalled.rss_before_mb} → ${memory.stalled.rss_peak_mb}`, '-', '-']);
  rows.push(['stalled watcher status', 'RESOURCE_EXHAUSTED', memory.stalled.status.split(':')[0]!, '-', '-']);
}
if (heartbeat) {
  rows.push(['VM-agent heartbeats/s vs a fixed-JSON route', '≥ 0.5×', heartbeat.cadre_heartbeats_per_s, heartbeat.fixed_json_per_s, heartbeat.ratio]);
}
printTable(`Summary (machine: ${results?.machine.cpus ?? '?'} CPUs, ${results?.machine.cpu_model ?? '?'}; figures in ${RESULTS_FILE})`, rows);
if (failed.length > 0) {
  console.error(`\nbenches that did not finish: ${failed.join(', ')}`);
  process.exitCode = 1;
}

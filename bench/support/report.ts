import { execFileSync } from 'node:child_process';
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

import { machineLoad, type MachineLoad } from './machine.ts';

export const RESULTS_FILE = fileURLToPath(new URL('../results/latest.json', import.meta.url));
/** Every bench run ever recorded, one JSON line each: the README's ranges come from here (`node bench/summary.ts`). */
export const HISTORY_FILE = fileURLToPath(new URL('../results/runs.jsonl', import.meta.url));
/**
 * Bumped whenever a bench changes what it measures or how, so ranges only span comparable runs. 2: load
 * generators in their own processes, baseline and Cadre alternating over several rounds. 3: the same on the
 * product after roz's numeric WorkerPhase.phase (the fan-out's events marked by mode) and the control-keyed stop-all.
 */
export const BENCH_VERSION = 3;

export interface HistoryLine {
  version: number;
  /** One `npm run bench` (BENCH_RUN_ID from run.ts), or a bench run alone. */
  run_id: string;
  bench: string;
  measured_at: string;
  machine: ResultsFile['machine'];
  /** The commit the bench ran on (the product it measured). */
  commit: string;
  load_start: MachineLoad;
  load_end: MachineLoad;
  figures: Record<string, unknown>;
}

const loadAtStart = machineLoad();

/**
 * An experiment's replacement for the gateway's shipped flags, applied by the harness's spawnGateway to every
 * gateway a bench starts: `BENCH_GATEWAY_FLAGS=""` runs it with none, `BENCH_GATEWAY_FLAGS="--max-semi-space-size=2"`
 * with that one. saveResults records it (as `gateway_flags_experiment`) for every bench, even when empty, which
 * keeps the run out of the summary's ranges.
 */
export const GATEWAY_FLAGS_EXPERIMENT: readonly string[] | undefined = process.env.BENCH_GATEWAY_FLAGS === undefined
  ? undefined
  : process.env.BENCH_GATEWAY_FLAGS.split(' ').filter(Boolean);

function headCommit(): string {
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: dirname(RESULTS_FILE), encoding: 'utf8' }).trim();
  } catch {
    return 'unknown';
  }
}

export interface ResultsFile {
  generated_at: string;
  machine: { node: string; cpus: number; cpu_model: string; mem_gb: number };
  /** One entry per bench (fanout, overhead, memory), written by that bench. */
  benches: Record<string, unknown>;
}

/**
 * Merges one bench's figures into results/latest.json (so each bench can run alone or from run.ts) and appends
 * them to results/runs.jsonl with the machine's load at the bench's start and end. Not kept: BENCH_CPU_PROF runs
 * (a CPU profiler slows what it watches) and BENCH_NO_RECORD runs (quick looks with shortened settings).
 */
export function saveResults(bench: string, figures: Record<string, unknown>): void {
  let file: ResultsFile | undefined;
  try {
    file = JSON.parse(readFileSync(RESULTS_FILE, 'utf8')) as ResultsFile;
  } catch {
    file = undefined;
  }
  const cpu = cpus();
  const machine = { node: process.version, cpus: cpu.length, cpu_model: cpu[0]?.model ?? 'unknown', mem_gb: Math.round(totalmem() / 2 ** 30) };
  const line: HistoryLine = {
    version: BENCH_VERSION,
    run_id: process.env.BENCH_RUN_ID ?? `alone-${new Date().toISOString()}`,
    bench,
    measured_at: new Date().toISOString(),
    machine,
    commit: headCommit(),
    load_start: loadAtStart,
    load_end: machineLoad(),
    figures: GATEWAY_FLAGS_EXPERIMENT ? { gateway_flags_experiment: GATEWAY_FLAGS_EXPERIMENT, ...figures } : figures,
  };
  const next: ResultsFile = {
    generated_at: new Date().toISOString(),
    machine,
    benches: { ...file?.benches, [bench]: { version: BENCH_VERSION, measured_at: line.measured_at, load_start: line.load_start, load_end: line.load_end, ...figures } },
  };
  mkdirSync(dirname(RESULTS_FILE), { recursive: true });
  if (process.env.BENCH_CPU_PROF || process.env.BENCH_NO_RECORD) return;
  writeFileSync(RESULTS_FILE, `${JSON.stringify(next, null, 2)}\n`);
  appendFileSync(HISTORY_FILE, `${JSON.stringify(line)}\n`);
}

export type Cell = string | number;

/** A compact fixed-width table: first row is the header. */
export function printTable(title: string, rows: Cell[][]): void {
  const text = rows.map((r) => r.map((c) => (typeof c === 'number' ? fmt(c) : c)));
  const widths = text[0]!.map((_, i) => Math.max(...text.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]): string => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  console.log(`\n${title}`);
  console.log(line(text[0]!));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const r of text.slice(1)) console.log(line(r));
}

function fmt(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  if (Number.isInteger(n) || Math.abs(n) >= 100) return Math.round(n).toLocaleString('en-US');
  return Math.abs(n) >= 10 ? n.toFixed(1) : n.toFixed(2);
}

export function note(text: string): void {
  console.log(`  ${text}`);
}

const t0 = performance.now();
/** A progress line on stderr, so a long bench shows where it is without cluttering the table. */
export function progress(text: string): void {
  process.stderr.write(`  [${((performance.now() - t0) / 1000).toFixed(1)} s] ${text}\n`);
}

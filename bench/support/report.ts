import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

export const RESULTS_FILE = fileURLToPath(new URL('../results/latest.json', import.meta.url));

export interface ResultsFile {
  generated_at: string;
  machine: { node: string; cpus: number; cpu_model: string; mem_gb: number };
  /** One entry per bench (fanout, overhead, memory), written by that bench. */
  benches: Record<string, unknown>;
}

/** Merges one bench's figures into results/latest.json, so each bench can run alone or from run.ts. */
export function saveResults(bench: string, figures: unknown): void {
  let file: ResultsFile | undefined;
  try {
    file = JSON.parse(readFileSync(RESULTS_FILE, 'utf8')) as ResultsFile;
  } catch {
    file = undefined;
  }
  const cpu = cpus();
  const next: ResultsFile = {
    generated_at: new Date().toISOString(),
    machine: { node: process.version, cpus: cpu.length, cpu_model: cpu[0]?.model ?? 'unknown', mem_gb: Math.round(totalmem() / 2 ** 30) },
    benches: { ...file?.benches, [bench]: { measured_at: new Date().toISOString(), ...(figures as object) } },
  };
  mkdirSync(dirname(RESULTS_FILE), { recursive: true });
  writeFileSync(RESULTS_FILE, `${JSON.stringify(next, null, 2)}\n`);
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

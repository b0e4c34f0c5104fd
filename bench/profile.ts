// Summarises V8 CPU profiles written by a bench run with BENCH_CPU_PROF=<dir> (see support/harness.ts): per
// process, where the time went by area (our apps and libs, each npm package, Node internals, GC, idle) and the
// top functions by self time and, for our own code, by inclusive time.
//   BENCH_CPU_PROF=/tmp/prof BENCH_ROUNDS=1 npm exec -- node bench/heartbeat.bench.ts
//   npm exec -- node bench/profile.ts /tmp/prof [top] [window label filter]
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { REPO } from './support/procs.ts';
import { printTable } from './support/report.ts';

interface ProfileNode { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }
interface Profile { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[]; startTime: number; endTime: number }

const dir = process.argv[2];
const TOP = Number(process.argv[3] ?? 20);
if (!dir) {
  console.error('usage: node bench/profile.ts <BENCH_CPU_PROF dir> [top]');
  process.exit(2);
}

function files(d: string): string[] {
  return readdirSync(d).flatMap((f) => {
    const p = join(d, f);
    return statSync(p).isDirectory() ? files(p) : p.endsWith('.cpuprofile') ? [p] : [];
  });
}

function area(url: string, name: string): string {
  if (!url) return name.startsWith('(') ? name : '(native)';
  if (url.startsWith('node:')) return 'node internals';
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm) return nm[1]!;
  const own = /\/((?:apps|libs)\/[^/]+)\//.exec(url);
  return own ? own[1]! : url;
}

const where = (n: ProfileNode): string => {
  const url = n.callFrame.url.replace('file://', '');
  const file = url.includes('node_modules') ? url.slice(url.lastIndexOf('node_modules/') + 13) : relative(REPO, url) || url;
  return `${n.callFrame.functionName || '(anonymous)'} ${file}:${n.callFrame.lineNumber + 1}`;
};

/** Measured windows the bench recorded (support/harness.ts profiledWindow); samples outside them are dropped. */
const windows = (() => {
  try {
    return readFileSync(join(dir, 'windows.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as { label: string; from_us: number; to_us: number });
  } catch {
    return [];
  }
})();
const filter = process.argv[4];
const kept = windows.filter((w) => !filter || w.label.includes(filter));
if (kept.length) console.log(`keeping samples inside ${kept.length} measured windows: ${[...new Set(kept.map((w) => w.label))].join(', ')}`);

for (const file of files(dir)) {
  const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  // Each sample counts as one sampling interval (the median gap between samples), not as the gap before it: on a
  // loaded machine the profiler's thread is descheduled too, and the sample after a 200 ms stall would otherwise
  // charge all of it to whatever function it caught (a two-line function once showed as 9% of a profile).
  const gaps = p.timeDeltas.filter((d) => d > 0).sort((a, b) => a - b);
  const interval = gaps[gaps.length >> 1] ?? 0;
  let at = p.startTime;
  p.samples.forEach((id, i) => {
    at += p.timeDeltas[i] ?? 0;
    if (kept.length && !kept.some((w) => at >= w.from_us && at <= w.to_us)) return;
    self.set(id, (self.get(id) ?? 0) + interval);
  });
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const idle = [...self.entries()].filter(([id]) => byId.get(id)!.callFrame.functionName === '(idle)').reduce((a, [, t]) => a + t, 0);
  const busy = total - idle;
  const pct = (us: number): string => `${((us / busy) * 100).toFixed(1)}%`;

  const areas = new Map<string, number>();
  const fns = new Map<string, number>();
  for (const [id, t] of self) {
    const n = byId.get(id)!;
    if (n.callFrame.functionName === '(idle)') continue;
    const a = area(n.callFrame.url, n.callFrame.functionName);
    areas.set(a, (areas.get(a) ?? 0) + t);
    fns.set(where(n), (fns.get(where(n)) ?? 0) + t);
  }
  // Inclusive time of our own functions (apps/, libs/): self plus everything they called.
  const inclusive = new Map<string, number>();
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  for (const [id, t] of self) {
    if (byId.get(id)!.callFrame.functionName === '(idle)') continue;
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const n = byId.get(cur)!;
      if (!/\/(apps|libs)\/[^/]+\/src\//.test(n.callFrame.url) || n.callFrame.url.includes('node_modules')) continue;
      const k = where(n);
      if (seen.has(k)) continue;
      seen.add(k);
      inclusive.set(k, (inclusive.get(k) ?? 0) + t);
    }
  }
  const top = (m: Map<string, number>, n: number) => [...m.entries()].sort((a, b) => b[1] - a[1]).slice(0, n);
  console.log(`\n### ${relative(process.cwd(), file)}: ${(total / 1e6).toFixed(1)} s sampled, ${(busy / 1e6).toFixed(2)} s busy (not idle)`);
  printTable('busy time by area (self)', [['area', 'ms', 'share'], ...top(areas, 14).map(([k, v]) => [k, Math.round(v / 1000), pct(v)])]);
  printTable(`top ${TOP} functions by self time`, [['function', 'ms', 'share'], ...top(fns, TOP).map(([k, v]) => [k, Math.round(v / 1000), pct(v)])]);
  printTable(`top ${TOP} of our functions by inclusive time`, [['function', 'ms', 'share'], ...top(inclusive, TOP).map(([k, v]) => [k, Math.round(v / 1000), pct(v)])]);
}

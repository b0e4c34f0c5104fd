// Loaded into a server under test with `node --import ./bench/support/probe.ts`: on SIGUSR2 it reports, since the
// previous SIGUSR2, the event loop's delay (perf_hooks.monitorEventLoopDelay), its utilisation, and GC pauses,
// as an `@@bench {"type":"probe"}` line on stderr, then starts a new window. Nothing in the product loads it.
// With BENCH_ALLOC=1 in its environment it also reports the bytes the process allocated on V8's heap in the
// window: the heap's growth between GCs (v8.GCProfiler gives the used size before and after each; Node 24 has no
// counter for it). Opt-in: the profiler keeps a record per GC until the next report.
import { writeSync } from 'node:fs';
import { GCProfiler, getHeapStatistics } from 'node:v8';
import { monitorEventLoopDelay, performance, PerformanceObserver, type EventLoopUtilization } from 'node:perf_hooks';

const RESOLUTION_MS = 5;
const delay = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
delay.enable();
let elu: EventLoopUtilization = performance.eventLoopUtilization();
let gc = { count: 0, totalMs: 0, maxMs: 0, major: 0, majorMs: 0 };
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    gc.count++;
    gc.totalMs += e.duration;
    gc.maxMs = Math.max(gc.maxMs, e.duration);
    // NODE_PERFORMANCE_GC_MAJOR = 4 (mark-compact)
    if (((e as { detail?: { kind?: number } }).detail)?.kind === 4) {
      gc.major++;
      gc.majorMs += e.duration;
    }
  }
}).observe({ entryTypes: ['gc'] });

const countAllocation = process.env.BENCH_ALLOC === '1';
let gcProfiler: GCProfiler | undefined;
let usedAtStart = 0;
const startAllocationWindow = (): void => {
  gcProfiler = new GCProfiler();
  gcProfiler.start();
  usedAtStart = getHeapStatistics().used_heap_size;
};
if (countAllocation) startAllocationWindow();

/** Bytes allocated since the window began: what each GC found in use beyond what the previous one left. */
function allocatedBytes(): number {
  const usedNow = getHeapStatistics().used_heap_size;
  let allocated = 0;
  let previous = usedAtStart;
  for (const s of gcProfiler?.stop()?.statistics ?? []) {
    allocated += s.beforeGC.heapStatistics.usedHeapSize - previous;
    previous = s.afterGC.heapStatistics.usedHeapSize;
  }
  startAllocationWindow();
  return allocated + usedNow - previous;
}

const ms = (ns: number): number => Math.round(ns / 1e4) / 100;
process.on('SIGUSR2', () => {
  const used = performance.eventLoopUtilization(elu);
  const report = {
    type: 'probe',
    // The histogram counts how late a RESOLUTION_MS timer fired: a stall of that length or less is not seen.
    resolution_ms: RESOLUTION_MS,
    loop_delay_ms: { p50: ms(delay.percentile(50)), p99: ms(delay.percentile(99)), max: ms(delay.max), mean: ms(delay.mean) },
    loop_utilization: Math.round(used.utilization * 1000) / 1000,
    gc: { count: gc.count, total_ms: Math.round(gc.totalMs * 10) / 10, max_ms: Math.round(gc.maxMs * 10) / 10, major: gc.major, major_ms: Math.round(gc.majorMs * 10) / 10 },
    ...(countAllocation && { allocated_mb: Math.round(allocatedBytes() / 1e4) / 100 }),
  };
  writeSync(2, `@@bench ${JSON.stringify(report)}\n`);
  delay.reset();
  elu = performance.eventLoopUtilization();
  gc = { count: 0, totalMs: 0, maxMs: 0, major: 0, majorMs: 0 };
});

import { readFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';

/** How busy the machine was: printed beside every figure and stored with it (the box is shared). */
export interface MachineLoad {
  /** 1, 5 and 15 minute load averages. */
  loadavg: [number, number, number];
  nproc: number;
  at: string;
}

export function machineLoad(): MachineLoad {
  const [a, b, c] = loadavg().map((x) => Math.round(x * 100) / 100) as [number, number, number];
  return { loadavg: [a, b, c], nproc: availableParallelism(), at: new Date().toISOString() };
}

export const loadText = (l: MachineLoad = machineLoad()): string => `load ${l.loadavg.join('/')} on ${l.nproc} CPUs`;

/** Share of all CPUs the whole machine spent busy between the call and the returned function's call (/proc/stat). */
export function machineBusyMark(): () => number {
  const read = (): { busy: number; total: number } => {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const idle = f[3]! + (f[4] ?? 0);
    const total = f.reduce((a, b) => a + b, 0);
    return { busy: total - idle, total };
  };
  const start = read();
  return () => {
    const end = read();
    return Math.round(((end.busy - start.busy) / Math.max(1, end.total - start.total)) * 100) / 100;
  };
}

// Alternating samples: round 1 runs A then B, round 2 A then B, and so on, so a slow spell on the shared machine
// lands on both sides rather than on one. Every sample is kept, with the machine's load when it was taken.
import { machineBusyMark, machineLoad, type MachineLoad } from './machine.ts';

export type Sample<T> = T & { round: number; side: string; load: MachineLoad; machine_busy: number };

export async function alternate<T extends object>(rounds: number, sides: Record<string, () => Promise<T>>): Promise<Sample<T>[]> {
  const out: Sample<T>[] = [];
  for (let round = 1; round <= rounds; round++) {
    for (const [side, run] of Object.entries(sides)) {
      const load = machineLoad();
      const busy = machineBusyMark();
      const figures = await run();
      out.push({ ...figures, round, side, load, machine_busy: busy() });
    }
  }
  return out;
}

export const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** "min–max" of the samples' values (one value alone as itself). */
export function range(xs: number[], digits = 1): string {
  const r = (x: number): string => String(Math.round(x * 10 ** digits) / 10 ** digits);
  const lo = Math.min(...xs);
  const hi = Math.max(...xs);
  return lo === hi ? r(lo) : `${r(lo)}–${r(hi)}`;
}

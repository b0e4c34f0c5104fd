// The child side of procs.ts's line protocol, for load generators in bench/load/.
import { createInterface } from 'node:readline';

/** Sends one message to the parent (stdout to a pipe is synchronous on Linux, so it is out before an exit). */
export function emit(type: string, data: object = {}): void {
  process.stdout.write(`@@bench ${JSON.stringify({ type, ...data })}\n`);
}

/** The parent's commands, one JSON object per stdin line. */
export async function* commands<T = Record<string, unknown>>(): AsyncGenerator<T> {
  try {
    for await (const line of createInterface({ input: process.stdin })) {
      if (line.trim()) yield JSON.parse(line) as T;
    }
  } finally {
    // Leaving the loop must not leave stdin holding the process open.
    process.stdin.destroy();
  }
}

/** Options a parent passes as one JSON argument. */
export const argJson = <T>(): T => JSON.parse(process.argv[2] ?? '{}') as T;

/** Monotonic milliseconds shared by every process on the machine (CLOCK_MONOTONIC), for cross-process latency. */
export const monoMs = (): number => Number(process.hrtime.bigint()) / 1e6;

export const f64ToBase64 = (a: Float64Array): string => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');
export function base64ToF64(s: string): Float64Array {
  const b = Buffer.from(s, 'base64');
  return new Float64Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
}

/** This process's CPU seconds so far (user + system). */
export function ownCpuSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

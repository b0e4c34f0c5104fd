import { writeSync } from 'node:fs';
import { pino, type Logger } from 'pino';
import { activeTraceIds } from './tracing.ts';

export type { Logger };

// Paths that may carry credentials anywhere they are logged. Keys are never logged on purpose; this is the net.
const REDACT = [
  'authorization',
  '*.authorization',
  'req.headers.authorization',
  'req.headers["x-windie-runs-key"]',
  'req.headers["x-windie-runs-control-key"]',
  'headers.authorization',
  'apiKey',
  '*.apiKey',
  'api_key',
  '*.api_key',
  'password',
  '*.password',
];

const pause = new Int32Array(new SharedArrayBuffer(4));

/**
 * Standard output, written synchronously. A full pipe (EAGAIN) is retried for up to ~100 ms and then the line is
 * dropped; a pipe nobody reads any more (EPIPE: the process that started us died) drops it at once. pino's default
 * destination retries EPIPE for ever while flushing at exit, which left orphaned processes spinning.
 */
const stdout = {
  write(line: string): void {
    let bytes = Buffer.from(line);
    for (let tries = 0; bytes.length > 0; ) {
      try {
        bytes = bytes.subarray(writeSync(1, bytes));
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if ((code !== 'EAGAIN' && code !== 'EBUSY') || ++tries > 100) return;
        Atomics.wait(pause, 0, 0, 1);
      }
    }
  },
};

/** The one logger factory: JSON lines, child loggers carry taskId/workerId, each line its trace_id when traced. */
export function createLogger(opts: { name: string; level?: string }): Logger {
  return pino(
    {
      name: opts.name,
      level: opts.level ?? 'info',
      redact: { paths: REDACT, censor: '[redacted]' },
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      // The trace of the work a line belongs to (none when tracing is off), so logs and spans join up.
      mixin: activeTraceIds,
    },
    stdout,
  );
}

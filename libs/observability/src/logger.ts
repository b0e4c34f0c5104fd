import { pino, type Logger } from 'pino';
import { activeTraceIds } from './tracing.ts';
import { stdoutDestination } from './log-destination.ts';
import { scrubError } from './scrub.ts';

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

/** The one logger factory: JSON lines on standard output (never blocking; see log-destination.ts), child loggers carry taskId/workerId, each line its trace_id when traced. */
export function createLogger(opts: { name: string; level?: string }): Logger {
  return pino(
    {
      name: opts.name,
      level: opts.level ?? 'info',
      redact: { paths: REDACT, censor: '[redacted]' },
      // Errors are logged without the arguments libraries attach to them (see scrub.ts).
      serializers: { err: scrubError, error: scrubError },
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      // The trace of the work a line belongs to (none when tracing is off), so logs and spans join up.
      mixin: activeTraceIds,
    },
    stdoutDestination(),
  );
}

/** The approvals inbox's append failed (ApprovalStore's onInboxFailed): one warning, the same in gateway and worker. */
export function logInboxFailure(logger: Logger): (err: unknown, about: string) => void {
  return (err, about) => logger.warn({ err: scrubError(err), about }, 'approvals inbox append failed: its log misses this transition');
}

import type { FastifyBaseLogger, FastifyServerOptions, LogLevel } from 'fastify';
import type { Bindings, ChildLoggerOptions } from 'pino';

type Method = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

/** pino's level numbers (its defaults; the gateway's logger adds none). */
const LEVELS: Record<LogLevel, number> = { fatal: 60, error: 50, warn: 40, info: 30, debug: 20, trace: 10, silent: Infinity };

/**
 * A request's logger that becomes the pino child Fastify would have made (the request id bound, the route's level)
 * only when something is logged at a level it writes. Fastify makes one per request, and every route logs at warn
 * and above, so nearly every request logs nothing: under heartbeat load building the child (its bindings run
 * through the redaction paths, its level rebuilds its methods) was about 2 KB of garbage per request.
 */
class RequestLogger implements FastifyBaseLogger {
  declare fatal: FastifyBaseLogger['fatal'];
  declare error: FastifyBaseLogger['error'];
  declare warn: FastifyBaseLogger['warn'];
  declare info: FastifyBaseLogger['info'];
  declare debug: FastifyBaseLogger['debug'];
  declare trace: FastifyBaseLogger['trace'];
  private made: FastifyBaseLogger | undefined;
  private readonly parent: FastifyBaseLogger;
  private readonly bindings: Bindings;
  private readonly options: ChildLoggerOptions;

  constructor(parent: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions) {
    this.parent = parent;
    this.bindings = bindings;
    this.options = options;
  }

  /** The child, made now if it was not yet. */
  get logger(): FastifyBaseLogger {
    return (this.made ??= this.parent.child(this.bindings, this.options));
  }

  get level(): string {
    return this.made?.level ?? this.options.level ?? this.parent.level;
  }

  set level(level: string) {
    this.logger.level = level;
  }

  writes(method: Method): boolean {
    return LEVELS[method] >= (LEVELS[this.level as LogLevel] ?? 0);
  }

  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.logger.child(bindings, options);
  }
}

// The log methods, one shape for every level: write through the child when the level is written, else nothing.
for (const method of ['fatal', 'error', 'warn', 'info', 'debug', 'trace'] as const) {
  RequestLogger.prototype[method] = function (this: RequestLogger, ...args: Parameters<FastifyBaseLogger['info']>): void {
    if (this.writes(method)) this.logger[method](...args);
  };
}

/** Fastify's `childLoggerFactory`: each request's logger, made on its first line (see RequestLogger). */
export const lazyRequestLogger: NonNullable<FastifyServerOptions['childLoggerFactory']> = (logger, bindings, options) => new RequestLogger(logger, bindings, options);

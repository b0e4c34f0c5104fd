import type { FastifyBaseLogger, FastifyServerOptions } from 'fastify';
import { levels, type Bindings, type ChildLoggerOptions } from 'pino';

type Method = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

/** A level's number in pino's own table (the gateway's logger adds no levels); `silent` is above every level. */
const rank = (level: string): number => levels.values[level] ?? (level === 'silent' ? Infinity : 0);

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
    return rank(method) >= rank(this.level);
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

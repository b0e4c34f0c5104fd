// Errors reach logs from libraries that attach what they sent: ioredis and BullMQ errors carry `command.args`
// (an `AUTH <user> <password>` among them when Redis refuses a password), and messages may quote a URL with its
// password. Everything logged as an error goes through here first.

/** `scheme://user:password@` → `scheme://user:***@`; `AUTH x y` → `AUTH ***`. */
export function scrubText(text: string): string {
  return text
    .replace(/([a-z][a-z0-9+.-]*:\/\/[^\s:/@]*:)[^\s@/]+@/gi, '$1***@')
    .replace(/\b(AUTH|HELLO\s+\d+\s+AUTH)\s+\S+(\s+\S+)?/gi, '$1 ***');
}

export interface ScrubbedError {
  type: string;
  message: string;
  stack?: string;
  code?: string | number;
  /** The Redis command that failed, by name only: its arguments may be secrets. */
  command?: string;
  cause?: ScrubbedError;
}

/** A loggable copy of an error without its arguments: name, message and stack scrubbed, the command by name. */
export function scrubError(err: unknown, depth = 0): ScrubbedError {
  // Error-like objects too (what scrubError itself returns, errors from other realms), so scrubbing twice is harmless.
  const errorLike = err instanceof Error || (typeof err === 'object' && err !== null && typeof (err as { message?: unknown }).message === 'string');
  if (!errorLike) return { type: typeof err, message: scrubText(String(err)) };
  const e = err as Error & { type?: unknown; code?: unknown; command?: unknown; cause?: unknown };
  const out: ScrubbedError = { type: typeof e.type === 'string' ? e.type : (e.name ?? 'Error'), message: scrubText(e.message) };
  if (e.stack) out.stack = scrubText(e.stack);
  if (typeof e.code === 'string' || typeof e.code === 'number') out.code = e.code;
  if (typeof e.command === 'string') out.command = e.command;
  else if (e.command && typeof (e.command as { name?: unknown }).name === 'string') out.command = (e.command as { name: string }).name;
  if (e.cause !== undefined && depth < 3) out.cause = scrubError(e.cause, depth + 1);
  return out;
}

/**
 * ioredis's own "Connection is closed." rejection of a command it sent for itself and left unhandled: a Cluster
 * follows an ASK redirect by sending ASKING without awaiting it (ioredis/built/cluster/index.js, `redis.asking()`),
 * so a redirect to a node whose connection closes meanwhile (a slot migrating to a node that goes away, a failover;
 * redis/ioredis#1140) rejects with nobody to hear it. The command the redirect was for fails on its own path.
 */
const isIoredisClosedConnection = (err: unknown): boolean =>
  err instanceof Error && err.message === 'Connection is closed.' && /[\\/]ioredis[\\/]/.test(err.stack ?? '');

/**
 * An uncaught error or unhandled rejection is logged (scrubbed, one JSON line) and ends the process with code 1,
 * instead of Node printing the error object, with whatever arguments it carries, to stderr. The one exception is
 * ioredis's unhandled "Connection is closed." (isIoredisClosedConnection): a Redis connection closing is an outage
 * the processes ride out, so it is logged as a warning, not a reason to exit mid-failover.
 */
export function exitOnCrash(logger: { fatal(obj: object, msg: string): void; warn(obj: object, msg: string): void }): void {
  const crash = (err: unknown): void => {
    logger.fatal({ err: scrubError(err) }, 'crashed');
    process.exit(1);
  };
  process.on('uncaughtException', crash);
  process.on('unhandledRejection', (reason) => {
    if (isIoredisClosedConnection(reason)) logger.warn({ err: scrubError(reason) }, 'a Redis command ioredis sent for itself failed: its connection closed');
    else crash(reason);
  });
}

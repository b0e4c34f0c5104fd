import { Redis } from 'ioredis';

/**
 * A connection for Cadre's own commands. `maxRetriesPerRequest: null` is what BullMQ requires of the
 * connections it is given, and suits a long-lived service: commands wait out a reconnect rather than fail.
 * `autoPipelining` batches the commands issued in one event-loop tick into one socket write: on a busy gateway
 * (heartbeats, appends, reads) that saves a syscall per command. Not for connections handed to BullMQ.
 */
export function connectRedis(url: string, name: string, opts: { autoPipelining?: boolean; onError?: (err: Error) => void } = {}): Redis {
  const redis = new Redis(url, { maxRetriesPerRequest: null, connectionName: name, enableAutoPipelining: opts.autoPipelining ?? false });
  // ioredis reconnects by itself; without a listener a refused reconnect would be an unhandled 'error' event.
  redis.on('error', opts.onError ?? (() => undefined));
  return redis;
}

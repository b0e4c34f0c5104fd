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

/** Redis refused our credentials: retrying cannot help, so a process should stop with this message. */
export class RedisAuthError extends Error {
  constructor(reply: string) {
    super(`Redis refused the credentials in REDIS_URL (${reply}); check the password (it is not shown here)`);
    this.name = 'RedisAuthError';
  }
}

const AUTH_REFUSED = /^(WRONGPASS|NOAUTH|NOPERM)|invalid password|AUTH.*(failed|without any password)/i;

/**
 * Waits until Redis at `url` accepts a connection with its credentials. A refused password rejects at once with
 * a RedisAuthError (its first word only: ioredis's error carries the AUTH arguments); an unreachable Redis is
 * waited for, as a service started before its Redis should.
 */
export async function checkRedisCredentials(url: string): Promise<void> {
  const probe = new Redis(url, { maxRetriesPerRequest: null, lazyConnect: true, connectionName: 'cadre-preflight' });
  try {
    await new Promise<void>((resolve, reject) => {
      probe.on('error', (err: Error) => {
        if (AUTH_REFUSED.test(err.message)) reject(new RedisAuthError(err.message.split(/\s/)[0]!));
      });
      probe.once('ready', () => resolve());
      probe.connect().catch(() => undefined);
    });
  } finally {
    probe.disconnect();
  }
}

import { Redis } from 'ioredis';

/**
 * A connection for Cadre's own commands. `maxRetriesPerRequest: null` is what BullMQ requires of the
 * connections it is given, and suits a long-lived service: commands wait out a reconnect rather than fail.
 */
export function connectRedis(url: string, name: string): Redis {
  return new Redis(url, { maxRetriesPerRequest: null, connectionName: name, lazyConnect: false });
}

import type { Redis } from 'ioredis';

/** Keys that change with no request: BullMQ's stall-check timer (a worker sets it every stall interval). */
export const BACKGROUND_KEYS = /:stalled-check$/;

/**
 * Every key matching `patterns` with its value (Redis's DUMP serialization, which covers every type) and whether
 * it expires: two equal dumps mean nothing was written, not even a TTL. Keys matching `exclude` are left out.
 */
export async function dumpRedis(redis: Redis, patterns: string[], exclude: RegExp = BACKGROUND_KEYS): Promise<Map<string, string>> {
  const keys = (await Promise.all(patterns.map((p) => redis.keys(p)))).flat().filter((k) => !exclude.test(k)).sort();
  const pipeline = redis.pipeline();
  for (const key of keys) pipeline.dumpBuffer(key).pttl(key);
  const replies = (await pipeline.exec()) ?? [];
  const dump = new Map<string, string>();
  keys.forEach((key, i) => {
    const value = replies[2 * i]?.[1] as Buffer | null;
    const pttl = replies[2 * i + 1]?.[1] as number;
    if (value) dump.set(key, `${pttl === -1 ? 'persistent' : 'expiring'} ${value.toString('hex')}`);
  });
  return dump;
}

/** The keys whose value differs between two dumps (added, removed or changed), for a readable failure. */
export function dumpDiff(before: Map<string, string>, after: Map<string, string>): string[] {
  const keys = new Set([...before.keys(), ...after.keys()]);
  return [...keys].filter((k) => before.get(k) !== after.get(k)).sort();
}

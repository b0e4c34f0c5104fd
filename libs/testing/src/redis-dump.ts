import { Cluster, type Redis } from 'ioredis';

/** Keys that change with no request: BullMQ's stall-check timer (a worker sets it every stall interval). */
export const BACKGROUND_KEYS = /:stalled-check$/;

/** KEYS `pattern`, on every master of a Cluster (KEYS answers for one node only). */
export async function keysMatching(redis: Redis | Cluster, pattern: string): Promise<string[]> {
  const nodes = redis instanceof Cluster ? redis.nodes('master') : [redis];
  return (await Promise.all(nodes.map((node) => node.keys(pattern)))).flat();
}

/**
 * Every key matching `patterns` with its value (Redis's DUMP serialization, which covers every type) and whether
 * it expires: two equal dumps mean nothing was written, not even a TTL. Keys matching `exclude` are left out.
 */
export async function dumpRedis(redis: Redis | Cluster, patterns: string[], exclude: RegExp = BACKGROUND_KEYS): Promise<Map<string, string>> {
  const keys = (await Promise.all(patterns.map((p) => keysMatching(redis, p)))).flat().filter((k) => !exclude.test(k)).sort();
  // One command per key, sent together (a pipeline could span a Cluster's nodes).
  const values = await Promise.all(keys.map((key) => Promise.all([redis.dumpBuffer(key), redis.pttl(key)])));
  const dump = new Map<string, string>();
  keys.forEach((key, i) => {
    const [value, pttl] = values[i]!;
    if (value) dump.set(key, `${pttl === -1 ? 'persistent' : 'expiring'} ${value.toString('hex')}`);
  });
  return dump;
}

/** The keys whose value differs between two dumps (added, removed or changed), for a readable failure. */
export function dumpDiff(before: Map<string, string>, after: Map<string, string>): string[] {
  const keys = new Set([...before.keys(), ...after.keys()]);
  return [...keys].filter((k) => before.get(k) !== after.get(k)).sort();
}

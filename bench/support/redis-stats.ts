import { Redis } from 'ioredis';

/** Calls per command from `INFO commandstats`, e.g. { xrange: 120, evalsha: 5000, 'client|setname': 3 }. */
export type CommandCounts = Record<string, number>;

/** Our own INFO/CONFIG/PING calls, left out of every total so measuring does not count itself. */
const BENCH_OWN = new Set(['info', 'config|resetstat', 'config|get', 'config|set', 'ping']);

/**
 * Reads a private Redis's command counters on a connection of its own. Commands run inside Lua scripts are
 * counted too (Redis counts them as well as the EVALSHA that ran them).
 */
export class RedisStats {
  private readonly admin: Redis;

  constructor(url: string) {
    this.admin = new Redis(url, { connectionName: 'bench-stats', maxRetriesPerRequest: 1 });
  }

  async reset(): Promise<void> {
    await this.admin.config('RESETSTAT');
  }

  async counts(): Promise<CommandCounts> {
    const info = await this.admin.info('commandstats');
    const counts: CommandCounts = {};
    for (const line of info.split(/\r?\n/)) {
      const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line);
      if (m && !BENCH_OWN.has(m[1]!)) counts[m[1]!] = Number(m[2]);
    }
    return counts;
  }

  /** Seconds of CPU the Redis server has used since it started (INFO cpu: user + sys, main thread and all). */
  async cpuSeconds(): Promise<number> {
    const info = await this.admin.info('cpu');
    const field = (name: string): number => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? NaN);
    return field('used_cpu_user') + field('used_cpu_sys');
  }

  async close(): Promise<void> {
    await this.admin.quit().catch(() => undefined);
  }
}

export function totalCalls(counts: CommandCounts): number {
  return Object.values(counts).reduce((a, b) => a + b, 0);
}

/** The `n` most called commands as `name×calls/div`, for a compact breakdown. */
export function topCommands(counts: CommandCounts, n: number, div = 1): Record<string, number> {
  return Object.fromEntries(
    Object.entries(counts)
      .sort(([, a], [, b]) => b - a)
      .slice(0, n)
      .map(([name, calls]) => [name, round(calls / div, 2)]),
  );
}

export const round = (x: number, digits = 1): number => Math.round(x * 10 ** digits) / 10 ** digits;

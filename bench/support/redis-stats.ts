import { Redis } from 'ioredis';

/** Calls per command from `INFO commandstats`, e.g. { xrange: 120, fcall: 5000, 'client|setname': 3 }. */
export type CommandCounts = Record<string, number>;

/** Our own INFO/CONFIG/SLOWLOG/PING calls, left out of every total so measuring does not count itself. */
const BENCH_OWN = new Set(['info', 'config|resetstat', 'config|get', 'config|set', 'ping', 'slowlog|get', 'slowlog|reset']);

/**
 * Reads a private Redis's command counters on a connection of its own. Commands run inside Lua scripts are
 * counted too (Redis counts them as well as the FCALL or EVALSHA that ran them).
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
    return (await this.detail()).calls;
  }

  /** Calls and microseconds Redis spent per command since the last reset (a script's time is its FCALL's or EVALSHA's). */
  async detail(): Promise<{ calls: CommandCounts; usec: CommandCounts }> {
    const info = await this.admin.info('commandstats');
    const calls: CommandCounts = {};
    const usec: CommandCounts = {};
    for (const line of info.split(/\r?\n/)) {
      const m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line);
      if (m && !BENCH_OWN.has(m[1]!)) {
        calls[m[1]!] = Number(m[2]);
        usec[m[1]!] = Number(m[3]);
      }
    }
    return { calls, usec };
  }

  /** Clears the slow log and logs every command slower than `micros` from now on. */
  async slowlogFrom(micros: number): Promise<void> {
    await this.admin.config('SET', 'slowlog-log-slower-than', String(micros));
    await this.admin.config('SET', 'slowlog-max-len', '1024');
    await this.admin.call('SLOWLOG', 'RESET');
  }

  /** Slow log entries since slowlogFrom: how many, and the slowest few as `command µs`. */
  async slowlog(top = 5): Promise<{ entries: number; slowest: string[] }> {
    const raw = (await this.admin.call('SLOWLOG', 'GET', '1024')) as [number, number, number, string[]][];
    const sorted = [...raw].sort((a, b) => b[2] - a[2]);
    return { entries: raw.length, slowest: sorted.slice(0, top).map((e) => `${e[3].slice(0, 2).join(' ').slice(0, 60)} ${e[2]}µs`) };
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

/**
 * The commands that run Lua: the store's functions (FCALL), BullMQ's and the benches' own scripts (EVALSHA, and
 * EVAL on a script's first run).
 */
const SCRIPT_COMMANDS = ['fcall', 'evalsha', 'eval'];

/** `counts` (calls or microseconds) summed over the commands that run Lua. */
export function scriptTotal(counts: CommandCounts): number {
  return SCRIPT_COMMANDS.reduce((sum, cmd) => sum + (counts[cmd] ?? 0), 0);
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

/** Bytes the Redis server holds for data and its own structures (INFO memory: used_memory). */
export async function usedMemory(redis: Redis): Promise<number> {
  const info = await redis.info('memory');
  return Number(/^used_memory:(\d+)/m.exec(info)?.[1] ?? NaN);
}

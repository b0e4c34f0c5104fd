// Parse configuration once, from one schema, reporting every problem at once. Apps call this in their
// config.ts; nothing else reads process.env.

export type Env = Record<string, string | undefined>;

export class ConfigError extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`invalid configuration:\n  - ${problems.join('\n  - ')}`);
    this.name = 'ConfigError';
    this.problems = problems;
  }
}

/** A field reads the first of its names that is set; `parse` returns the value or throws a message. */
export interface Field<T> {
  names: readonly string[];
  /** `env` is there for the few fields that weigh several variables together (see redisTarget). */
  parse(raw: string | undefined, name: string, env: Env): T;
}

export function readConfig<S extends Record<string, Field<unknown>>>(
  env: Env,
  schema: S,
): { [K in keyof S]: S[K] extends Field<infer T> ? T : never } {
  const out: Record<string, unknown> = {};
  const problems: string[] = [];
  for (const [key, field] of Object.entries(schema)) {
    const name = field.names.find((n) => env[n] !== undefined && env[n] !== '') ?? field.names[0]!;
    const raw = env[name] === '' ? undefined : env[name];
    try {
      out[key] = field.parse(raw, name, env);
    } catch (err) {
      // A field that reads other variables too (redisTarget) reports their problems under their own names.
      if (err instanceof ConfigError) problems.push(...err.problems);
      else problems.push(`${name}: ${(err as Error).message}`);
    }
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return out as { [K in keyof S]: S[K] extends Field<infer T> ? T : never };
}

type Names = string | readonly string[];
const namesOf = (n: Names): readonly string[] => (typeof n === 'string' ? [n] : n);

export function str(names: Names, fallback: string): Field<string>;
export function str(names: Names): Field<string | undefined>;
export function str(names: Names, fallback?: string): Field<string | undefined> {
  return { names: namesOf(names), parse: (raw) => raw ?? fallback };
}

/** `raw` as an integer if it is written in decimal digits (an optional minus): never `0x10`, `1e9`, `1.0` or ` 8`. */
function decimalInteger(raw: string): number | undefined {
  const value = Number(raw);
  return /^-?\d+$/.test(raw) && Number.isSafeInteger(value) ? value : undefined;
}

export function int(names: Names, fallback: number, opts: { min?: number; max?: number } = {}): Field<number> {
  return {
    names: namesOf(names),
    parse(raw) {
      if (raw === undefined) return fallback;
      const value = decimalInteger(raw);
      if (value === undefined) throw new Error(`expected an integer in decimal digits, got "${raw}"`);
      if (opts.min !== undefined && value < opts.min) throw new Error(`must be >= ${opts.min}, got ${value}`);
      if (opts.max !== undefined && value > opts.max) throw new Error(`must be <= ${opts.max}, got ${value}`);
      return value;
    },
  };
}

/** How long an ended task's, run's or session's keys and log are kept, unless CADRE_EVENT_RETENTION_SEC says. */
export const DEFAULT_RETENTION_SEC = 7 * 24 * 3600;

/** CADRE_EVENT_RETENTION_SEC, read alike by every app that writes logs. */
export function eventRetentionSec(): Field<number> {
  return int('CADRE_EVENT_RETENTION_SEC', DEFAULT_RETENTION_SEC, { min: 60 });
}

export function bool(names: Names, fallback: boolean): Field<boolean> {
  return {
    names: namesOf(names),
    parse(raw) {
      if (raw === undefined) return fallback;
      if (/^(1|true|yes|on)$/i.test(raw)) return true;
      if (/^(0|false|no|off)$/i.test(raw)) return false;
      throw new Error(`expected true or false, got "${raw}"`);
    },
  };
}

/** What a URL variable accepts: its schemes (`http:`), and a valid value to show when it is refused. */
export interface UrlKind {
  schemes: readonly string[];
  example: string;
}

export const HTTP_URL = { schemes: ['http:', 'https:'], example: 'http://127.0.0.1:8080' } as const satisfies UrlKind;
/** ioredis's: `rediss:` is TLS, `unix:` a socket path (`unix:///path/to/redis.sock`). */
const REDIS_URL_KIND = { schemes: ['redis:', 'rediss:', 'unix:'], example: 'redis://127.0.0.1:6379' } as const satisfies UrlKind;

/**
 * A URL of one of `kind`'s schemes: anything else (`gateway:8080`, which `new URL` reads as scheme `gateway:`) is
 * refused with an example, rather than accepted and failed on every call. With `noCredentials`, one carrying
 * `user:pass@` is refused (its value is never repeated): a client that would send them nowhere (the `openai` package
 * ignores them) must not start and fail every call later.
 */
export function url(names: Names, kind: UrlKind, opts: { noCredentials?: string } = {}): Field<string | undefined> {
  return {
    names: namesOf(names),
    parse(raw) {
      if (raw === undefined) return undefined;
      let parsed: URL;
      try {
        parsed = new URL(raw);
      } catch {
        // Not a URL, so its password cannot be cut out reliably: name nothing but its length.
        throw new Error(`expected a URL (scheme://host:port) such as ${kind.example}, got ${raw.length} characters that do not parse as one`);
      }
      // What precedes the first colon is never a password (user:pass@host puts the user there), so it may be shown.
      if (!kind.schemes.includes(parsed.protocol)) {
        const schemes = kind.schemes.map((s) => `${s}//`);
        const accepted = `${schemes.slice(0, -1).join(', ')}${schemes.length > 1 ? ' or ' : ''}${schemes.at(-1)!}`;
        throw new Error(`expected a URL starting ${accepted} (e.g. ${kind.example}), got one starting "${parsed.protocol.slice(0, 40)}"`);
      }
      if (opts.noCredentials !== undefined && (parsed.username !== '' || parsed.password !== '')) {
        throw new Error(`must not carry a user name or password (user:pass@ in ${redactUrl(raw)}); ${opts.noCredentials}`);
      }
      return raw;
    },
  };
}

/** OPENAI_BASE_URL, read alike by every app that calls the model (and refused with credentials the client ignores). */
export function openaiBaseUrl(): Field<string | undefined> {
  return url('OPENAI_BASE_URL', { schemes: HTTP_URL.schemes, example: 'http://127.0.0.1:8081/v1' }, { noCredentials: 'put the key in OPENAI_API_KEY' });
}

export function oneOf<const T extends string>(names: Names, values: readonly T[], fallback: T): Field<T> {
  return {
    names: namesOf(names),
    parse(raw) {
      if (raw === undefined) return fallback;
      if (!(values as readonly string[]).includes(raw)) throw new Error(`expected one of ${values.join(', ')}, got "${raw}"`);
      return raw as T;
    },
  };
}

/**
 * `ws1:key1,ws2:key2` → key → workspace. Workspace ids may not contain ':' or ','; keys may contain ':' (split
 * at the first colon).
 */
export function workspaceKeys(names: Names): Field<Map<string, string>> {
  return {
    names: namesOf(names),
    parse(raw) {
      const map = new Map<string, string>();
      if (raw === undefined) return map;
      for (const pair of raw.split(',').map((p) => p.trim()).filter(Boolean)) {
        const colon = pair.indexOf(':');
        if (colon <= 0 || colon === pair.length - 1) throw new Error('expected workspace:key pairs separated by commas');
        map.set(pair.slice(colon + 1), pair.slice(0, colon));
      }
      return map;
    },
  };
}

/** A positive integer, or `fallback` when unset, invalid or not positive (never an error). */
export function positiveIntOr(names: Names, fallback: number): Field<number> {
  return {
    names: namesOf(names),
    parse(raw) {
      const value = raw === undefined ? undefined : decimalInteger(raw);
      return value !== undefined && value > 0 ? value : fallback;
    },
  };
}

export interface HostPort {
  host: string;
  port: number;
}

/** Where Cadre's Redis is: one node, a Redis Cluster, or a master found through Sentinel. */
export type RedisTarget =
  | { mode: 'single'; url: string }
  | { mode: 'cluster'; nodes: HostPort[]; username?: string; password?: string; tls: boolean }
  | { mode: 'sentinel'; sentinels: HostPort[]; name: string; username?: string; password?: string; sentinelPassword?: string; tls: boolean; db: number };

/** What a process without any Redis variable is told (after `REDIS_URL: required: `). */
export const REDIS_REQUIRED = 'the Redis to use, e.g. redis://127.0.0.1:6379 (or REDIS_CLUSTER_NODES for a Redis Cluster, REDIS_SENTINELS with REDIS_SENTINEL_NAME for Sentinel)';

const REDIS_MODES = ['REDIS_URL', 'REDIS_CLUSTER_NODES', 'REDIS_SENTINELS'] as const;
/** Read beside REDIS_CLUSTER_NODES or REDIS_SENTINELS (REDIS_URL carries its own credentials and TLS scheme). */
const REDIS_SETTINGS = {
  username: 'REDIS_USERNAME', password: 'REDIS_PASSWORD', tls: 'REDIS_TLS', sentinelName: 'REDIS_SENTINEL_NAME',
  sentinelPassword: 'REDIS_SENTINEL_PASSWORD', db: 'REDIS_DB',
} as const;

/** `host:port,host:port` (IPv6 as `[::1]:7000`); throws naming what is wrong, never echoing more than a host. */
function hostPortList(raw: string): HostPort[] {
  const out: HostPort[] = [];
  for (const item of raw.split(',').map((p) => p.trim()).filter(Boolean)) {
    const match = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(item);
    const port = Number(match?.[2]);
    if (!match || port < 1 || port > 65535) throw new Error(`expected host:port entries separated by commas, got "${item.slice(0, 80)}"`);
    out.push({ host: match[1]!.replace(/^\[|\]$/g, ''), port });
  }
  if (out.length === 0) throw new Error('expected at least one host:port');
  return out;
}

/** What a database number may be: the server's `databases` setting bounds it (16 by default), and start-up asks it. */
const REDIS_DB_RANGE = 'a database number: 0 or more, below the server\'s "databases" setting (16 by default: 0 to 15)';

/**
 * A REDIS_URL whose database, if it names one (the path of redis:// and rediss://, `?db=` of any), is a number:
 * ioredis would send `SELECT abc` and crash on the reply. Whether the server has that many is asked at start-up.
 */
function redisUrl(raw: string): string {
  const parsed = new URL(raw);
  const path = parsed.protocol === 'unix:' ? '' : parsed.pathname.replace(/^\/$/, '');
  if (path !== '' && !/^\/\d+$/.test(path)) throw new Error(`the path after host:port must be ${REDIS_DB_RANGE}, e.g. redis://127.0.0.1:6379/0; got "${path.slice(0, 40)}"`);
  const db = parsed.searchParams.get('db');
  if (db !== null && !/^\d+$/.test(db)) throw new Error(`?db= must be ${REDIS_DB_RANGE}; got "${db.slice(0, 40)}"`);
  return raw;
}

/**
 * The Redis to use, from exactly one of: REDIS_URL (one node, credentials in the URL), REDIS_CLUSTER_NODES (seed
 * nodes of a Redis Cluster), REDIS_SENTINELS with REDIS_SENTINEL_NAME (the master a Sentinel group names). Cluster
 * and Sentinel read REDIS_USERNAME / REDIS_PASSWORD (and REDIS_SENTINEL_PASSWORD, REDIS_DB), and REDIS_TLS.
 * undefined when none is set (the app decides whether that is an error).
 */
export function redisTarget(): Field<RedisTarget | undefined> {
  return {
    names: REDIS_MODES,
    parse(raw, name, env) {
      const set = REDIS_MODES.filter((n) => env[n] !== undefined && env[n] !== '');
      if (set.length > 1) throw new Error(`set only one of REDIS_URL (one node), REDIS_CLUSTER_NODES (a cluster) or REDIS_SENTINELS (Sentinel); found ${set.join(' and ')}`);
      if (raw === undefined) return undefined;
      if (name === 'REDIS_URL') return { mode: 'single', url: redisUrl(url('REDIS_URL', REDIS_URL_KIND).parse(raw, name, env)!) };
      const credentials = {
        ...(env[REDIS_SETTINGS.username] ? { username: env[REDIS_SETTINGS.username] } : {}),
        ...(env[REDIS_SETTINGS.password] ? { password: env[REDIS_SETTINGS.password] } : {}),
      };
      // Read as fields of their own, so that a bad value is reported under its own name (a ConfigError).
      const { tls, db } = readConfig(env, {
        tls: bool(REDIS_SETTINGS.tls, false),
        db: int(REDIS_SETTINGS.db, 0, { min: 0 }),
      });
      if (name === 'REDIS_CLUSTER_NODES') return { mode: 'cluster', nodes: hostPortList(raw), ...credentials, tls };
      const masterName = env[REDIS_SETTINGS.sentinelName];
      if (!masterName) throw new Error('REDIS_SENTINEL_NAME is required with REDIS_SENTINELS: the name of the master the sentinels watch (e.g. mymaster)');
      const sentinelPassword = env[REDIS_SETTINGS.sentinelPassword];
      return { mode: 'sentinel', sentinels: hostPortList(raw), name: masterName, ...credentials, tls, db, ...(sentinelPassword ? { sentinelPassword } : {}) };
    },
  };
}

/** Where a RedisTarget points, as it may be shown (logs, banners): never a password. */
export function describeRedisTarget(target: RedisTarget): string {
  const list = (nodes: HostPort[]): string => nodes.map((n) => `${n.host.includes(':') ? `[${n.host}]` : n.host}:${n.port}`).join(',');
  switch (target.mode) {
    case 'single':
      return redactUrl(target.url);
    case 'cluster':
      return `cluster ${list(target.nodes)}${target.tls ? ' (tls)' : ''}`;
    case 'sentinel':
      return `sentinel master "${target.name}" via ${list(target.sentinels)}${target.tls ? ' (tls)' : ''}`;
  }
}

/** A URL as it may be shown (logs, banners): any password replaced. */
export function redactUrl(raw: string): string {
  try {
    const url = new URL(raw);
    if (url.password) url.password = '***';
    return url.toString();
  } catch {
    return '[unparseable URL]';
  }
}

/** pino's levels, in order; `silent` turns logging off. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** LOG_LEVEL, checked at start-up (pino would otherwise throw its own stack trace on an unknown level). */
export function logLevel(fallback: LogLevel = 'info'): Field<LogLevel> {
  return oneOf('LOG_LEVEL', LOG_LEVELS, fallback);
}

/**
 * Ends a process that cannot start because of its configuration: one line per problem on stderr, each naming the
 * variable and what it accepts (`gateway: LOG_LEVEL: expected one of …, got "verbose"`), then exit code 1. No
 * stack trace: the operator has nothing to debug, only a variable to fix.
 */
export function exitForConfig(app: string, problems: readonly string[]): never {
  for (const problem of problems) process.stderr.write(`${app}: ${problem}\n`);
  process.exit(1);
}

/** `parse()`, or exitForConfig with its problems when it throws a ConfigError. */
export function configOrExit<T>(app: string, parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    if (err instanceof ConfigError) exitForConfig(app, err.problems);
    throw err;
  }
}

/**
 * The configuration problem behind a failed listen (port taken, not allowed, or an address this machine does not
 * have), naming the variables that chose it; undefined for any other error.
 */
export function listenProblem(err: unknown, where: { port: number; host: string; portVariable?: string; hostVariable?: string }): string | undefined {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  const portVariable = where.portVariable ?? 'PORT';
  const hostVariable = where.hostVariable ?? 'HOST';
  const at = `${where.host}:${where.port}`;
  switch (code) {
    case 'EADDRINUSE':
      return `${portVariable}: port ${where.port} is already in use on ${where.host}; stop what listens there or choose another ${portVariable} (0 picks a free one)`;
    case 'EACCES':
      return `${portVariable}: not allowed to listen on ${at} (ports below 1024 need privileges); choose a ${portVariable} from 1024 to 65535`;
    case 'EADDRNOTAVAIL':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `${hostVariable}: cannot listen on "${where.host}": not an address of this machine (use 127.0.0.1, 0.0.0.0 or one of its interfaces)`;
    default:
      return undefined;
  }
}

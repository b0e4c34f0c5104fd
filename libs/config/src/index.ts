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
  parse(raw: string | undefined, name: string): T;
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
      out[key] = field.parse(raw, name);
    } catch (err) {
      problems.push(`${name}: ${(err as Error).message}`);
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

export function int(names: Names, fallback: number, opts: { min?: number; max?: number } = {}): Field<number> {
  return {
    names: namesOf(names),
    parse(raw) {
      if (raw === undefined) return fallback;
      const value = Number(raw);
      if (!Number.isInteger(value)) throw new Error(`expected an integer, got "${raw}"`);
      if (opts.min !== undefined && value < opts.min) throw new Error(`must be >= ${opts.min}, got ${value}`);
      if (opts.max !== undefined && value > opts.max) throw new Error(`must be <= ${opts.max}, got ${value}`);
      return value;
    },
  };
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

/**
 * A URL. With `noCredentials`, one carrying `user:pass@` is refused (its value is never repeated): a client that
 * would send them nowhere (the `openai` package ignores them) must not start and fail every call later.
 */
export function url(names: Names, opts: { noCredentials?: string } = {}): Field<string | undefined> {
  return {
    names: namesOf(names),
    parse(raw) {
      if (raw === undefined) return undefined;
      let parsed: URL;
      try {
        parsed = new URL(raw);
      } catch {
        // Not a URL, so its password cannot be cut out reliably: name nothing but its length.
        throw new Error(`expected a URL (scheme://host:port), got ${raw.length} characters that do not parse as one`);
      }
      if (opts.noCredentials !== undefined && (parsed.username !== '' || parsed.password !== '')) {
        throw new Error(`must not carry a user name or password (user:pass@ in ${redactUrl(raw)}); ${opts.noCredentials}`);
      }
      return raw;
    },
  };
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
      const value = Number(raw);
      return raw !== undefined && Number.isInteger(value) && value > 0 ? value : fallback;
    },
  };
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

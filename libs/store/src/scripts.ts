import { createHash } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import type { RedisClient } from './connect.ts';
import { luaErrorTable } from './errors.ts';

// Lua scripts live in ./lua as `<name>-<numberOfKeys>.lua` (BullMQ's convention); `--@include <file>` lines
// inline ./lua/includes/<file>.lua so shared helpers are written once. `--@include errors` is the one include with
// no file: the ERR table of error codes, generated from SCRIPT_ERRORS in errors.ts.
const LUA_DIR = new URL('./lua/', import.meta.url);

interface ScriptSource {
  name: string;
  numberOfKeys: number;
  lua: string;
}

function loadScripts(): ScriptSource[] {
  return readdirSync(LUA_DIR)
    .filter((file) => file.endsWith('.lua'))
    .map((file) => {
      const match = /^(\w+)-(\d+)\.lua$/.exec(file);
      if (!match) throw new Error(`lua script ${file} must be named <name>-<numberOfKeys>.lua`);
      const raw = readFileSync(new URL(file, LUA_DIR), 'utf8');
      return { name: match[1]!, numberOfKeys: Number(match[2]), lua: countingAppends(inline(raw)) };
    });
}

/** Inlines `--@include` lines (recursively, each file once). */
function inline(source: string, seen = new Set<string>()): string {
  return source.replace(/^--@include (\S+)$/gm, (_, inc: string) => {
    if (seen.has(inc)) return '';
    seen.add(inc);
    if (inc === 'errors') return luaErrorTable();
    return inline(readFileSync(new URL(`includes/${inc}.lua`, LUA_DIR), 'utf8'), seen);
  });
}

/** The kinds of event log the scripts append to (event-log.lua's `log` argument), as the metric labels them. */
export const EVENT_LOGS = ['task', 'run', 'session', 'approvals'] as const;
export type EventLog = (typeof EVENT_LOGS)[number];

/**
 * Wraps a script so that its reply also says how many events it appended to each kind of log: appendToLog
 * (event-log.lua) counts into `appendedEvents`, declared here around the script's body. Every script goes through
 * this one place, so no call site counts by hand and none can forget to. The reply becomes
 * `[<count per EVENT_LOGS>..., <the script's own reply>]` (the reply last: a nil reply leaves the counts in place).
 */
function countingAppends(lua: string): string {
  return [
    `local appendedEvents = { ${EVENT_LOGS.map((log) => `${log} = 0`).join(', ')} }`,
    'local function script()',
    lua,
    'end',
    'local reply = script()',
    `return { ${EVENT_LOGS.map((log) => `appendedEvents.${log}`).join(', ')}, reply }`,
  ].join('\n');
}

/** Events appended by the scripts each connection ran: what this process wrote, per kind of log. */
const appended = new WeakMap<RedisClient, Record<EventLog, number>>();

/** The events this connection's scripts have appended since it opened, per kind of log (for metrics). */
export function eventsAppended(redis: RedisClient): Readonly<Record<EventLog, number>> {
  let counts = appended.get(redis);
  if (!counts) {
    counts = Object.fromEntries(EVENT_LOGS.map((log) => [log, 0])) as Record<EventLog, number>;
    appended.set(redis, counts);
  }
  return counts;
}

/** eventsAppended summed over a process's connections (the gateway sends heartbeats over one of their own). */
export function eventsAppendedOver(connections: readonly RedisClient[]): Record<EventLog, number> {
  const sum = Object.fromEntries(EVENT_LOGS.map((log) => [log, 0])) as Record<EventLog, number>;
  for (const redis of connections) for (const log of EVENT_LOGS) sum[log] += eventsAppended(redis)[log];
  return sum;
}

let cached: ScriptSource[] | undefined;

const shaOf = (source: ScriptSource): string => createHash('sha1').update(source.lua).digest('hex');

/** Each store script's name by the SHA it runs under (EVALSHA), for tools that read a Redis MONITOR. */
export function scriptNamesBySha(): Map<string, string> {
  cached ??= loadScripts();
  return new Map(cached.map((source) => [shaOf(source), source.name]));
}

/**
 * Runs `script` by its SHA (EVALSHA); a server that does not hold it yet (first use, restart, failover) answers
 * NOSCRIPT, and the script is sent whole (EVAL), which loads it for the next time.
 */
async function run(redis: RedisClient, script: ScriptSource & { sha: string }, args: ScriptArg[]): Promise<unknown[]> {
  try {
    return (await redis.evalsha(script.sha, script.numberOfKeys, ...args)) as unknown[];
  } catch (err) {
    if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err;
    return (await redis.eval(script.lua, script.numberOfKeys, ...args)) as unknown[];
  }
}

const scriptsByConnection = new WeakMap<RedisClient, StoreScripts>();

/** The scripts, typed. Arguments after the keys are strings or numbers. */
export type ScriptArg = string | number;
export interface StoreScripts {
  createTask(...args: ScriptArg[]): Promise<number>;
  claimWorker(...args: ScriptArg[]): Promise<[number, number, string?, string?, (string[] | string | null)?, number?]>;
  appendWorkerEvent(...args: ScriptArg[]): Promise<number>;
  finishWorker(...args: ScriptArg[]): Promise<number>;
  addWorkers(...args: ScriptArg[]): Promise<number>;
  cancelTask(...args: ScriptArg[]): Promise<number>;
  indexTask(...args: ScriptArg[]): Promise<number>;
  createRun(...args: ScriptArg[]): Promise<number>;
  heartbeat(...args: ScriptArg[]): Promise<string>;
  dispatchRun(...args: ScriptArg[]): Promise<number>;
  relayRunEvents(...args: ScriptArg[]): Promise<number>;
  /** [seq | error code, approvals a stop cancelled (records' JSON)] */
  controlRun(...args: ScriptArg[]): Promise<[number, string[]?]>;
  /** [run ids stopped, approvals their stops cancelled (records' JSON)] */
  stopAllRuns(...args: ScriptArg[]): Promise<[string[], string[]]>;
  /** [leases expired, runs requeued, approvals of the lost attempts cancelled (records' JSON)] */
  expireRunLeases(...args: ScriptArg[]): Promise<[number, number, string[]]>;
  createSession(...args: ScriptArg[]): Promise<number>;
  startTurn(...args: ScriptArg[]): Promise<number>;
  claimTurn(...args: ScriptArg[]): Promise<[number, number, number?]>;
  commitTurn(...args: ScriptArg[]): Promise<number>;
  parkTurn(...args: ScriptArg[]): Promise<number>;
  keepSessionAlive(...args: ScriptArg[]): Promise<number>;
  resolveToolCall(...args: ScriptArg[]): Promise<number>;
  /** [wake or code, call JSON] */
  decideSessionApproval(...args: ScriptArg[]): Promise<[number, string?]>;
  /** [1 | 0 | error code, the ended turn's start (ms)] */
  cancelTurn(...args: ScriptArg[]): Promise<[number, number?, number?]>;
  /** [1 closed now | 2 already | error code, the ended turn's start (ms) or -1 when none ran] */
  closeSession(...args: ScriptArg[]): Promise<[number, number?]>;
  registerTools(...args: ScriptArg[]): Promise<number>;
  queueInput(...args: ScriptArg[]): Promise<[number, number?]>;
  deliverSteering(...args: ScriptArg[]): Promise<number>;
  finishTurn(...args: ScriptArg[]): Promise<[number, number?]>;
  /** [1 aborted | 0 | error code, dropped inputs, the prompt's wake, the aborted turn's start (ms) or -1] */
  abortTurn(...args: ScriptArg[]): Promise<[number, number?, number?, number?]>;
  setSessionFields(...args: ScriptArg[]): Promise<number>;
  compactTranscript(...args: ScriptArg[]): Promise<number>;
  bindConversation(...args: ScriptArg[]): Promise<string>;
  parkWorker(...args: ScriptArg[]): Promise<number>;
  decideApproval(...args: ScriptArg[]): Promise<[number, string?, number?]>;
  setApprovalPolicy(...args: ScriptArg[]): Promise<number>;
  /** [last seq, ids of the approvals its decisions took out of the pending index] */
  appendInbox(...args: ScriptArg[]): Promise<[number, string[]]>;
  indexPendingApprovals(...args: ScriptArg[]): Promise<number>;
  askRunApprovals(...args: ScriptArg[]): Promise<number>;
  decideRunApproval(...args: ScriptArg[]): Promise<[number, string?]>;
}

/**
 * The scripts as methods: each returns the script's own reply, and adds what it appended to eventsAppended. Not
 * ioredis's defineCommand: ioredis copies every defined command onto each pipeline it builds (each autopipelined
 * batch and each MULTI), which with these scripts cost more than building the pipeline itself.
 */
export function scriptsOf(redis: RedisClient): StoreScripts {
  let scripts = scriptsByConnection.get(redis);
  if (!scripts) {
    cached ??= loadScripts();
    const counts = eventsAppended(redis) as Record<EventLog, number>;
    scripts = Object.fromEntries(cached.map((source) => {
      const script = { ...source, sha: shaOf(source) };
      return [source.name, async (...args: ScriptArg[]) => {
        const reply = await run(redis, script, args);
        for (let i = 0; i < EVENT_LOGS.length; i++) counts[EVENT_LOGS[i]!] += reply[i] as number;
        return reply[EVENT_LOGS.length] ?? null;
      }];
    })) as unknown as StoreScripts;
    scriptsByConnection.set(redis, scripts);
  }
  return scripts;
}

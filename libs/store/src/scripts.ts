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
      return { name: match[1]!, numberOfKeys: Number(match[2]), lua: inline(raw) };
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

let cached: ScriptSource[] | undefined;

/** Registers every script as a command on the connection (EVALSHA with an EVAL fallback, done by ioredis). */
export function defineScripts(redis: RedisClient): void {
  cached ??= loadScripts();
  for (const s of cached) {
    if (!(s.name in redis)) redis.defineCommand(s.name, { numberOfKeys: s.numberOfKeys, lua: s.lua });
  }
}

/** The commands defineScripts adds, typed. Arguments after the keys are strings or numbers. */
export type ScriptArg = string | number;
export interface StoreScripts {
  createTask(...args: ScriptArg[]): Promise<number>;
  claimWorker(...args: ScriptArg[]): Promise<[number, number, string?, string?, string[]?]>;
  appendWorkerEvent(...args: ScriptArg[]): Promise<number>;
  finishWorker(...args: ScriptArg[]): Promise<number>;
  addWorkers(...args: ScriptArg[]): Promise<number>;
  cancelTask(...args: ScriptArg[]): Promise<number>;
  indexTask(...args: ScriptArg[]): Promise<number>;
  createRun(...args: ScriptArg[]): Promise<number>;
  heartbeat(...args: ScriptArg[]): Promise<string>;
  dispatchRun(...args: ScriptArg[]): Promise<number>;
  relayRunEvents(...args: ScriptArg[]): Promise<number>;
  controlRun(...args: ScriptArg[]): Promise<number>;
  stopAllRuns(...args: ScriptArg[]): Promise<string[]>;
  /** [leases expired, runs requeued] */
  expireRunLeases(...args: ScriptArg[]): Promise<[number, number]>;
  createSession(...args: ScriptArg[]): Promise<number>;
  startTurn(...args: ScriptArg[]): Promise<number>;
  claimTurn(...args: ScriptArg[]): Promise<[number, number]>;
  commitTurn(...args: ScriptArg[]): Promise<number>;
  parkTurn(...args: ScriptArg[]): Promise<number>;
  resolveToolCall(...args: ScriptArg[]): Promise<number>;
  /** [wake or code, call JSON] */
  decideSessionApproval(...args: ScriptArg[]): Promise<[number, string?]>;
  cancelTurn(...args: ScriptArg[]): Promise<number>;
  closeSession(...args: ScriptArg[]): Promise<number>;
  registerTools(...args: ScriptArg[]): Promise<number>;
  queueInput(...args: ScriptArg[]): Promise<[number, number?]>;
  deliverSteering(...args: ScriptArg[]): Promise<number>;
  finishTurn(...args: ScriptArg[]): Promise<[number, number?]>;
  abortTurn(...args: ScriptArg[]): Promise<[number, number?, number?]>;
  setSessionFields(...args: ScriptArg[]): Promise<number>;
  compactTranscript(...args: ScriptArg[]): Promise<number>;
  bindConversation(...args: ScriptArg[]): Promise<string>;
  parkWorker(...args: ScriptArg[]): Promise<number>;
  decideApproval(...args: ScriptArg[]): Promise<[number, string?, number?]>;
  setApprovalPolicy(...args: ScriptArg[]): Promise<number>;
  appendInbox(...args: ScriptArg[]): Promise<number>;
  askRunApprovals(...args: ScriptArg[]): Promise<number>;
  decideRunApproval(...args: ScriptArg[]): Promise<[number, string?]>;
}

export function scriptsOf(redis: RedisClient): StoreScripts {
  defineScripts(redis);
  return redis as unknown as StoreScripts;
}

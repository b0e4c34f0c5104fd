import { createHash } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import type { RedisClient } from './connect.ts';
import { luaErrorTable, unknownErrorNames } from './errors.ts';

// Lua scripts live in ./lua as `<name>-<numberOfKeys>.lua` (BullMQ's convention); `--@include <file>` lines name
// shared helpers in ./lua/includes/<file>.lua, written once. `--@include errors` is the one include with no file:
// the ERR table of error codes, generated from SCRIPT_ERRORS in errors.ts.
//
// All of them become ONE Redis Functions library (storeLibrary): FUNCTION LOAD once per server, FCALL by name. Each
// include is defined once, when Redis loads the library, so a call runs its script's body only — inlined into an
// EVAL script, the ~30 included functions and tables were created again on every call (bench/README.md, "Sixth
// round"). Includes nest: each opens a `do` block inside the include it includes (event-log < approval-inbox <
// run-log, event-log < task-log, event-log < session-log < session-inputs), and each script's function is defined
// inside the block of its innermost include; so task, session and run scripts each see their own family's helpers
// (all three have a `metaKey` and an `appendEvent`), as they did inlined.
//
// What an include takes from the call (its KEYS) or must not carry from one call to the next it declares as locals
// and sets in `enter<IncludeName>(KEYS)` (task-log: enterTaskLog), which every function calls at its entry, outer
// includes first. Module-level state reset at entry is safe: Redis runs one function at a time, each to its end.
// The build refuses an include whose top-level `local`s without a value its enter does not set (see enterOf).
// No function is flagged `no-writes`: every script writes.
const LUA_DIR = new URL('./lua/', import.meta.url);
const INCLUDE_LINE = /^--@include (\S+)$/gm;

interface Include {
  name: string;
  /** The include this one includes (its block's parent), if any. */
  parent: string | undefined;
  lua: string;
  /** `enter<Name>`, when the include defines one. */
  enter: string | undefined;
}

interface ScriptSource {
  name: string;
  numberOfKeys: number;
  /** The innermost include (the block the script's function is defined in). */
  include: string | undefined;
  usesErrors: boolean;
  body: string;
}

const directIncludes = (lua: string): string[] => [...lua.matchAll(INCLUDE_LINE)].map((m) => m[1]!).filter((name) => name !== 'errors');
const withoutIncludeLines = (lua: string): string => lua.replace(INCLUDE_LINE, '');

/** `name` and the includes around it, innermost first. */
function chainOf(name: string | undefined, includes: ReadonlyMap<string, Include>): Include[] {
  const chain: Include[] = [];
  for (let include = name ? includes.get(name) : undefined; include; include = include.parent ? includes.get(include.parent) : undefined) chain.push(include);
  return chain;
}

/** Of a file's includes, the one inside all the others: they must form one chain, or one block cannot hold them all. */
function innermost(names: string[], includes: ReadonlyMap<string, Include>, file: string): string | undefined {
  const inner = names.find((name) => names.every((other) => chainOf(name, includes).some((i) => i.name === other)));
  if (names.length > 0 && !inner) throw new Error(`${file}: its includes (${names.join(', ')}) must each include the one before`);
  return inner;
}

/** A script naming an error code the table lacks would answer nil where it means to refuse: no library has it. */
function refuseUnknownErrors(lua: string, file: string): void {
  const unknown = unknownErrorNames(lua);
  if (unknown.length > 0) throw new Error(`${file}: no script error named ${unknown.join(', ')} (errors.ts SCRIPT_ERRORS)`);
}

/** `local a, b` at an include's top level with no value: per-call state (the call's keys, what a call collects). */
const UNSET_LOCALS = /^local (?!function\b)([\w, ]+?)\s*(?:--.*)?$/gm;
const namesIn = (list: string): string[] => list.split(',').map((name) => name.trim());

/**
 * The include's `enter<Name>`, if it has one. Per-call state left unset at a call's entry would carry the previous
 * call's (its keys: another task's), so an include that declares some must have its enter, and the enter must set
 * each of them: a misspelt or missing enter is refused here rather than skipped.
 */
function enterOf(name: string, lua: string, file: string): string | undefined {
  const enter = `enter${name.replace(/(?:^|-)(\w)/g, (_, c: string) => c.toUpperCase())}`;
  const unset = [...lua.matchAll(UNSET_LOCALS)].flatMap((m) => namesIn(m[1]!));
  const body = new RegExp(`^local function ${enter}\\(.*\\)$([\\s\\S]*?)^end$`, 'm').exec(lua)?.[1];
  if (body === undefined) {
    if (unset.length > 0) throw new Error(`${file}: ${unset.join(', ')} ${unset.length > 1 ? 'are' : 'is'} declared without a value (per-call state), so the include needs \`local function ${enter}(KEYS)\` to set ${unset.length > 1 ? 'them' : 'it'} at each call's entry`);
    return undefined;
  }
  const assigned = new Set([...body.matchAll(/^\s*([\w, ]+?)\s*=(?!=)/gm)].flatMap((m) => namesIn(m[1]!)));
  const missing = unset.filter((local) => !assigned.has(local));
  if (missing.length > 0) throw new Error(`${file}: ${enter} does not set ${missing.join(', ')} (declared without a value: per-call state, set at each call's entry)`);
  return enter;
}

function loadIncludes(luaDir: URL): Map<string, Include> {
  const includes = new Map<string, Include>();
  /** The includes being loaded, outermost first: one of them included again is a cycle. */
  const loading: string[] = [];
  const load = (name: string): void => {
    if (includes.has(name)) return;
    const file = `includes/${name}.lua`;
    if (loading.includes(name)) throw new Error(`${file}: an include cycle (${[...loading.slice(loading.indexOf(name)), name].join(' includes ')})`);
    loading.push(name);
    const lua = readFileSync(new URL(file, luaDir), 'utf8');
    const direct = directIncludes(lua);
    direct.forEach(load);
    loading.pop();
    refuseUnknownErrors(lua, file);
    includes.set(name, {
      name,
      parent: innermost(direct, includes, file),
      lua: withoutIncludeLines(lua),
      enter: enterOf(name, lua, file),
    });
  };
  for (const file of readdirSync(new URL('includes/', luaDir))) load(file.replace(/\.lua$/, ''));
  return includes;
}

function loadScripts(luaDir: URL, includes: ReadonlyMap<string, Include>): ScriptSource[] {
  return readdirSync(luaDir)
    .filter((file) => file.endsWith('.lua'))
    .map((file) => {
      const match = /^(\w+)-(\d+)\.lua$/.exec(file);
      if (!match) throw new Error(`lua script ${file} must be named <name>-<numberOfKeys>.lua`);
      const raw = readFileSync(new URL(file, luaDir), 'utf8');
      refuseUnknownErrors(raw, file);
      return {
        name: match[1]!,
        numberOfKeys: Number(match[2]),
        include: innermost(directIncludes(raw), includes, file),
        usesErrors: /^--@include errors$/m.test(raw),
        body: withoutIncludeLines(raw),
      };
    });
}

/** The kinds of event log the scripts append to (event-log.lua's `log` argument), as the metric labels them. */
export const EVENT_LOGS = ['task', 'run', 'session', 'approvals'] as const;
export type EventLog = (typeof EVENT_LOGS)[number];

/**
 * Every call's reply also says how many events it appended to each kind of log: appendToLog (event-log.lua) counts
 * into `appendedEvents`, declared here. Every script goes through this one place, so no call site counts by hand
 * and none can forget to. The reply becomes `[<count per EVENT_LOGS>..., <the script's own reply>]` (the reply
 * last: a nil reply leaves the counts in place). One table for every call: beginCall resets it at each entry.
 */
const COUNTING = [
  `local appendedEvents = { ${EVENT_LOGS.map((log) => `${log} = 0`).join(', ')} }`,
  `local function beginCall() ${EVENT_LOGS.map((log) => `appendedEvents.${log} = 0`).join(' ')} end`,
  `local function withCounts(reply) return { ${EVENT_LOGS.map((log) => `appendedEvents.${log}`).join(', ')}, reply } end`,
].join('\n');

/** A call's entry: the counts reset, then each include's enter<Name>, outer includes first; then the script. */
function entry(script: ScriptSource, includes: ReadonlyMap<string, Include>): string {
  const enters = chainOf(script.include, includes).reverse().flatMap((i) => (i.enter ? [`${i.enter}(KEYS)`] : []));
  return ['beginCall()', ...enters, 'return withCounts(script(KEYS, ARGV))'].join('\n');
}

/** The script's body as a function of (KEYS, ARGV): functions may not read KEYS and ARGV as globals. */
const scriptFunction = (script: ScriptSource): string => ['local function script(KEYS, ARGV)', script.body, 'end'].join('\n');

interface StoreFunction {
  /** The FCALL name: `<script>_<hash12>`. */
  name: string;
  numberOfKeys: number;
}

interface StoreLibrary {
  /** `cadre_<hash12>`, the hash of the library's code. */
  name: string;
  code: string;
  functions: Map<string, StoreFunction>;
}

/**
 * The library, named by its content's hash, as are its functions: FUNCTION LOAD refuses a function name another
 * library holds, so a rolling upgrade's old and new processes each load and call their own library on one Redis.
 * A replaced library stays on the server until FUNCTION DELETE or FUNCTION FLUSH (it is small, and an old process
 * may still be calling it). Built from another directory only by tests.
 */
export function buildLibrary(luaDir: URL = LUA_DIR): StoreLibrary {
  const includes = loadIncludes(luaDir);
  const scripts = loadScripts(luaDir, includes);
  const code = (libraryName: string, suffix: string): string => {
    const block = (include: Include | undefined): string[] => [
      ...(include ? ['do', include.lua] : []),
      ...scripts
        .filter((s) => s.include === include?.name)
        // Its own block: `script` is a local, and the top level may hold at most 200 of them.
        .flatMap((s) => ['do', scriptFunction(s), `redis.register_function('${s.name}${suffix}', function(KEYS, ARGV)`, entry(s, includes), 'end)', 'end']),
      ...[...includes.values()].filter((i) => i.parent === include?.name).flatMap(block),
      ...(include ? ['end'] : []),
    ];
    return [`#!lua name=${libraryName}`, luaErrorTable(), COUNTING, ...block(undefined)].join('\n');
  };
  const hash = createHash('sha1').update(code('cadre', '')).digest('hex').slice(0, 12);
  return {
    name: `cadre_${hash}`,
    code: code(`cadre_${hash}`, `_${hash}`),
    functions: new Map(scripts.map((s) => [s.name, { name: `${s.name}_${hash}`, numberOfKeys: s.numberOfKeys }])),
  };
}

let library: StoreLibrary | undefined;
const storeLibrary = (): StoreLibrary => (library ??= buildLibrary());

/**
 * The scripts as EVAL scripts, each with its includes inlined, as the store ran them before the library: kept for
 * bench/script-cost.ts, which measures one way against the other. Not used by the store.
 */
export function scriptsAsEval(): Map<string, { lua: string; numberOfKeys: number }> {
  const includes = loadIncludes(LUA_DIR);
  return new Map(loadScripts(LUA_DIR, includes).map((s) => [s.name, {
    numberOfKeys: s.numberOfKeys,
    lua: [
      ...(s.usesErrors ? [luaErrorTable()] : []),
      COUNTING,
      ...chainOf(s.include, includes).reverse().map((i) => i.lua),
      scriptFunction(s),
      entry(s, includes),
    ].join('\n'),
  }]));
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

/** Each store script's name by its function's name (what FCALL names), for tools that read a Redis MONITOR. */
export function scriptNamesByFunction(): Map<string, string> {
  return new Map([...storeLibrary().functions].map(([script, fn]) => [fn.name, script]));
}

/** The library's code (FUNCTION LOAD), for tests and benches that load it themselves. */
export const storeLibraryCode = (): string => storeLibrary().code;

const isFunctionNotFound = (err: unknown): boolean => err instanceof Error && /^ERR Function not found/i.test(err.message);
const alreadyLoaded = (err: Error): boolean => /already exists/.test(err.message);

/** Replies that say a command was not run where it was sent (a Cluster's slot moved or is unavailable meanwhile). */
const isRedirectOrClusterState = (err: Error): boolean => /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN) /.test(err.message);

/**
 * FUNCTION LOAD of the library on every master the client knows (on one node: that node), each answering, or
 * "already exists" where it has it; then the first other refusal (NOPERM, a node out of reach), if any.
 */
export async function loadStoreLibrary(redis: RedisClient): Promise<void> {
  const nodes = 'nodes' in redis ? redis.nodes('master') : [redis];
  const loads = await Promise.allSettled(nodes.map((node) => node.call('FUNCTION', 'LOAD', storeLibrary().code)));
  const refused = loads.find((load) => load.status === 'rejected' && !(load.reason instanceof Error && alreadyLoaded(load.reason)));
  if (refused) throw (refused as PromiseRejectedResult).reason;
}

/**
 * Calls the script's function (FCALL). A server without the library (first use, a restart without persistence, a
 * failover to a node that never had it) answers "Function not found": the library is loaded (FUNCTION LOAD) and the
 * call made again, pipelined after it. A pipeline goes to one node, on a Cluster the node of the FCALL's key, so the
 * library reaches the very node that answered (FUNCTION LOAD has no key to be routed by). A concurrent caller may
 * have loaded it first ("already exists": the same code, by its name).
 */
async function run(redis: RedisClient, fn: StoreFunction, args: ScriptArg[]): Promise<unknown[]> {
  const call = async (): Promise<unknown[]> => (await redis.fcall(fn.name, fn.numberOfKeys, ...args)) as unknown[];
  try {
    return await call();
  } catch (err) {
    if (!isFunctionNotFound(err)) throw err;
  }
  try {
    return await loadAndCall(redis, fn, args, call);
  } catch (err) {
    if (!isFunctionNotFound(err)) throw err;
  }
  // Still not found: the call went to a node the pipeline did not reach. A slot migrating to a node without the
  // library redirects the call there (ASK) but not the pipeline, whose FUNCTION LOAD the slot's old owner answers;
  // a MOVED to such a node is followed before ioredis knows the new slot map. A redirect adds the node it names to
  // the masters ioredis knows, so loading on all of them reaches it. A master out of reach (failing over) must not
  // fail a call whose own node took the library: its refusal is what the call answers only if the call is refused too.
  const refusal = await loadStoreLibrary(redis).then(() => undefined, (err: unknown) => err);
  try {
    return await call();
  } catch (err) {
    throw isFunctionNotFound(err) && refusal !== undefined ? refusal : err;
  }
}

/** FUNCTION LOAD and the call, pipelined: to the node of the call's key. */
async function loadAndCall(redis: RedisClient, fn: StoreFunction, args: ScriptArg[], call: () => Promise<unknown[]>): Promise<unknown[]> {
  const replies = await redis.pipeline().call('FUNCTION', 'LOAD', storeLibrary().code).fcall(fn.name, fn.numberOfKeys, ...args).exec();
  const [[loadErr], [callErr, reply]] = replies as [[Error | null, unknown], [Error | null, unknown]];
  if (loadErr && !alreadyLoaded(loadErr)) throw loadErr;
  if (!callErr) return reply as unknown[];
  // Not run there: sent alone, ioredis follows the Cluster where the slot went (and waits out a failover).
  if (isRedirectOrClusterState(callErr)) return await call();
  throw callErr;
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
    const counts = eventsAppended(redis) as Record<EventLog, number>;
    scripts = Object.fromEntries([...storeLibrary().functions].map(([name, fn]) => {
      return [name, async (...args: ScriptArg[]) => {
        const reply = await run(redis, fn, args);
        for (let i = 0; i < EVENT_LOGS.length; i++) counts[EVENT_LOGS[i]!] += reply[i] as number;
        return reply[EVENT_LOGS.length] ?? null;
      }];
    })) as unknown as StoreScripts;
    scriptsByConnection.set(redis, scripts);
  }
  return scripts;
}

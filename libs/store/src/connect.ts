import { setTimeout as sleep } from 'node:timers/promises';
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { describeRedisTarget, type RedisTarget } from '@cadre/config';
import { awaitWithin } from '@cadre/lifecycle';
import { loadStoreLibrary } from './scripts.ts';

/**
 * A connection to Cadre's Redis, whichever kind the configuration names: one node (or a Sentinel-found master) is
 * a `Redis`, a Redis Cluster a `Cluster`. Both take the same commands; what differs is that on a Cluster a MULTI or
 * pipeline must stay in one slot, which the stores guarantee (see keys.ts).
 */
export type RedisClient = Redis | Cluster;

export interface ConnectOptions {
  /**
   * `autoPipelining` batches the commands issued in one event-loop tick into one socket write (per node on a
   * Cluster): on a busy gateway (heartbeats, appends, reads) that saves a syscall per command. Not for connections
   * handed to BullMQ.
   */
  autoPipelining?: boolean;
  /** A connection that will SSUBSCRIBE: on a Cluster it then keeps one subscriber connection per master. */
  shardedSubscriber?: boolean;
  /**
   * One node or Sentinel: a command waits for Redis about 10 s at most (15 s in any case: BOUNDED_WAIT), then fails
   * unavailable, instead of waiting out the whole outage. For a gateway's own commands, which a caller waits on; never for a
   * connection handed to BullMQ (it requires them to wait). A Cluster client gives up by itself (~20 s of retries).
   */
  boundedWait?: boolean;
  onError?: (err: Error) => void;
}

/**
 * A bounded connection's options (ConnectOptions.boundedWait). A command queued while the client reconnects is
 * rejected unsent (one sent as the connection dropped may have run) by the 10th failed attempt since it was queued:
 * ioredis fails the queue at every 10th attempt of an outage (MaxRetriesPerRequestError, "Reached the max retries
 * per request limit"). Attempts are at most 1 s apart (ioredis: 2 s), so that is within ~3 s of the
 * connection's loss and ~10 s later in a long outage. Shorter than the Cluster's ~20 s: a client that is told 503 can
 * retry, or go to another gateway, while one left waiting can only time out, and a Redis restart (the outage a
 * single node has) takes longer than either anyway. `commandTimeout` is the backstop where attempts do not fail fast
 * (a host that drops packets: each attempt waits for ioredis's 10 s connect timeout) or a connected Redis stops
 * answering; a command it rejects ("Command timed out") may still be sent when Redis is back.
 */
const BOUNDED_WAIT: RedisOptions = {
  maxRetriesPerRequest: 9,
  retryStrategy: (attempt: number) => Math.min(attempt * 50, 1_000),
  commandTimeout: 15_000,
};

/**
 * The one way every process connects to Redis. `maxRetriesPerRequest: null` is what BullMQ requires of the
 * connections it is given, and suits a long-lived service: commands wait out a reconnect (or a failover) rather
 * than fail. A plain URL string is read as REDIS_URL would be.
 */
export function connectRedis(target: RedisTarget | string, name: string, opts: ConnectOptions = {}): RedisClient {
  const client = open(typeof target === 'string' ? { mode: 'single', url: target } : target, name, opts, false);
  // ioredis reconnects by itself; without a listener a refused reconnect would be an unhandled 'error' event.
  client.on('error', opts.onError ?? (() => undefined));
  return client;
}

function open(target: RedisTarget, name: string, opts: ConnectOptions, lazyConnect: boolean): RedisClient {
  const common: RedisOptions = { maxRetriesPerRequest: null, connectionName: name, lazyConnect, ...(opts.boundedWait ? BOUNDED_WAIT : {}) };
  switch (target.mode) {
    case 'single':
      return new Redis(target.url, { ...common, enableAutoPipelining: opts.autoPipelining ?? false });
    case 'sentinel':
      return new Redis({
        ...common,
        sentinels: target.sentinels,
        name: target.name,
        db: target.db,
        enableAutoPipelining: opts.autoPipelining ?? false,
        ...credentials(target),
        ...(target.sentinelPassword ? { sentinelPassword: target.sentinelPassword } : {}),
        ...(target.tls ? { tls: {}, enableTLSForSentinelMode: true, sentinelTLS: {} } : {}),
      });
    case 'cluster': {
      const options: ClusterOptions = {
        lazyConnect,
        enableAutoPipelining: opts.autoPipelining ?? false,
        shardedSubscribers: opts.shardedSubscriber ?? false,
        redisOptions: { maxRetriesPerRequest: null, connectionName: name, ...credentials(target), ...(target.tls ? { tls: {} } : {}) },
        // A master that died: retry on the new topology rather than fail the command while its replica takes over
        // (node timeout + election: seconds). Until the nodes agree, a MOVED can point back and forth, so redirects
        // wait too, and ioredis's default of 16 of them (spent in well under a second) becomes 100 (over 10 s).
        // Reads go to the slot's master, never a replica: a replica lags, and a read must see the write it follows
        // (a task just created, an event just appended).
        scaleReads: 'master',
        // No ready check (CLUSTER INFO must say ok): when it fails — the nodes answer but the cluster is down —
        // ioredis reconnects without ever settling the connect() it was checking for, and BullMQ's blocking
        // connection, reconnected by its stuck-command watchdog during an outage, awaits that connect() for good: the
        // worker stops fetching jobs and cannot close. Without it the client is up once it has the slot map, and
        // commands wait out CLUSTERDOWN as below.
        enableReadyCheck: false,
        retryDelayOnFailover: 200,
        retryDelayOnClusterDown: 200,
        retryDelayOnTryAgain: 200,
        retryDelayOnMoved: 100,
        maxRedirections: 100,
        // Managed clusters announce their nodes by address behind TLS names: keep the name the seed was given.
        ...(target.tls ? { dnsLookup: (address: string, callback: (err: null, address: string) => void) => callback(null, address) } : {}),
      };
      return new Cluster(target.nodes, options);
    }
  }
}

function credentials(target: { username?: string; password?: string }): Pick<RedisOptions, 'username' | 'password'> {
  return { ...(target.username ? { username: target.username } : {}), ...(target.password ? { password: target.password } : {}) };
}

/** The variable an operator fixes when Redis refuses the credentials. */
function credentialsVariable(target: RedisTarget): string {
  return target.mode === 'single' ? 'REDIS_URL' : 'REDIS_PASSWORD';
}

/**
 * Replies and client errors that say Redis cannot answer right now — a master failing over, a slot moving, a node
 * still loading, a lost connection, the client's retries spent waiting for one of those (a Cluster client's, a
 * bounded connection's), a bounded command's timeout, our credentials refused after a password rotation (NOAUTH,
 * WRONGPASS: an operator's to fix, nothing the caller did) — and nothing about the data asked for.
 */
const UNAVAILABLE_REPLY = /^(MOVED|ASK|CLUSTERDOWN|TRYAGAIN|READONLY|LOADING|MASTERDOWN|NOREPLICAS|BUSY|NOAUTH|WRONGPASS) /;
const UNAVAILABLE_CLIENT = /^(Connection is closed|Too many Cluster redirections|Cluster isn't ready|Failed to refresh slots cache|None of startup nodes is available|Reached the max retries per request limit|Stream isn't writeable|Command timed out)/;
const UNAVAILABLE_SOCKET = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);

/**
 * Whether a command failed because Redis could not answer for now (see UNAVAILABLE_REPLY) rather than because of
 * what was asked. An edge answers such a failure as "unavailable, retry" (503 / UNAVAILABLE): never as "not found",
 * which a client would believe. A MULTI discarded for such a reply to one of its commands (EXECABORT) is one too.
 */
export function isRedisUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err instanceof RedisNoAnswerError) return true;
  if (UNAVAILABLE_SOCKET.has((err as NodeJS.ErrnoException).code ?? '')) return true;
  if (UNAVAILABLE_REPLY.test(err.message) || UNAVAILABLE_CLIENT.test(err.message)) return true;
  return discardedFor(err, isRedisUnavailable);
}

/**
 * Whether Redis refused a command for want of memory (`maxmemory` reached under `noeviction`): no outage to wait
 * out, but Redis took none of it (a store function is refused before it runs), and it may succeed once memory is
 * freed. A MULTI discarded for it (EXECABORT) too.
 */
export function isRedisOutOfMemory(err: unknown): boolean {
  return err instanceof Error && (/^OOM /.test(err.message) || discardedFor(err, isRedisOutOfMemory));
}

/** A MULTI that Redis discarded (EXECABORT) because it refused its commands, each for a reason `refusedFor` accepts. */
function discardedFor(err: Error, refusedFor: (err: unknown) => boolean): boolean {
  const previous = (err as { previousErrors?: unknown[] }).previousErrors;
  return /^EXECABORT /.test(err.message) && Array.isArray(previous) && previous.length > 0 && previous.every(refusedFor);
}

/**
 * Ends a connection now and rejects the commands waiting on it ("Connection is closed"). disconnect() alone does not
 * while ioredis waits to reconnect (the state it is in nearly all the time when Redis refuses connections): the
 * socket already closed, so no close event runs the handler that flushes the queues, and the status stays
 * `reconnecting`. One more connect attempt, after disconnect() marked the close as ours, fails and runs that handler,
 * which then ends the client. Verified on one node (Sentinel's client is the same kind); a Cluster client only gets
 * disconnect(), not verified.
 */
export function endConnection(client: RedisClient): void {
  const waitingToReconnect = !client.isCluster && client.status === 'reconnecting';
  client.disconnect();
  if (waitingToReconnect) client.connect().catch(() => undefined);
}

/**
 * Redis did not answer a command in the time its caller could wait. On one node a command sent while Redis is down
 * is not rejected (`maxRetriesPerRequest: null`): it waits in the client's queue until Redis is back, so a caller
 * with a deadline stops waiting with this error. It counts as unavailable; the command itself may still run later.
 */
export class RedisNoAnswerError extends Error {
  constructor(ms: number) {
    super(`Redis did not answer within ${ms} ms`);
    this.name = 'RedisNoAnswerError';
  }
}

/**
 * Runs `op` until it is answered or fails for another reason than Redis being unavailable: while Redis cannot answer,
 * tries again every `everyMs`, for `withinMs` in all, or until `signal` aborts. Each try is bounded by the time left
 * (a try with no answer by then ends in a RedisNoAnswerError), so the bound holds on one node too, where a command
 * waits for a dead Redis rather than fail. Rejects with the last error when it gives up. A try given up on may still
 * run once Redis is back: callers' writes must be fenced (by a lease, a lock) against that.
 */
export async function retryWhileUnavailable<T>(op: () => Promise<T>, opts: { withinMs: number; everyMs?: number; signal?: AbortSignal }): Promise<T> {
  const giveUpAt = Date.now() + opts.withinMs;
  const everyMs = opts.everyMs ?? 250;
  for (;;) {
    try {
      return await answeredBy(op(), giveUpAt, opts.signal);
    } catch (err) {
      if (!isRedisUnavailable(err) || opts.signal?.aborted || Date.now() + everyMs > giveUpAt) throw err;
      await sleep(everyMs, undefined, { signal: opts.signal }).catch(() => undefined);
    }
  }
}

/** `pending`'s outcome if it comes by `giveUpAt` and before `signal` aborts, else a RedisNoAnswerError. */
async function answeredBy<T>(pending: Promise<T>, giveUpAt: number, signal?: AbortSignal): Promise<T> {
  const waitMs = Math.max(0, giveUpAt - Date.now());
  const answer = await awaitWithin(pending, waitMs, signal);
  if (!answer) throw new RedisNoAnswerError(waitMs);
  return answer.value;
}

/**
 * Redis refused our credentials, what Cadre needs them to permit, or the database the configuration names: retrying
 * cannot help, so a process should stop with this message.
 */
export class RedisAccessError extends Error {
  /** The variable an operator fixes. */
  readonly variable: string;
  constructor(message: string, variable: string) {
    super(message);
    this.name = 'RedisAccessError';
    this.variable = variable;
  }
}

const DB_OUT_OF_RANGE = /^ERR DB index is out of range/;
const AUTH_REFUSED = /^(WRONGPASS|NOAUTH|NOPERM)|invalid password|AUTH.*(failed|without any password)/i;

/** How often checkRedisAccess says it is still waiting for a Redis it cannot reach. */
const UNREACHABLE_REPORT_EVERY_MS = 10_000;
/** How long a first attempt may go without answer or error before that is said (ioredis's connect timeout is 10 s). */
const UNREACHABLE_FIRST_SILENCE_MS = 3_000;

export interface AccessCheckOptions {
  /**
   * Told, soon after the first failed attempt and then at most every 10 s while Redis cannot be reached, one line
   * naming the variable, where it points (no password) and why (`REDIS_URL: cannot reach redis://:***@host:6379
   * (ECONNREFUSED); retrying`).
   */
  onUnreachable?: (problem: string) => void;
}

/** The variable that names the database (ioredis SELECTs it on connecting; a Cluster has only database 0). */
function databaseVariable(target: RedisTarget): string {
  return target.mode === 'single' ? 'REDIS_URL' : 'REDIS_DB';
}

/**
 * Waits until Redis accepts a connection with its credentials and database, then checks what they permit. A refused
 * password rejects at once with a RedisAccessError (its first word only: ioredis's error carries the AUTH
 * arguments), as does a database beyond the server's `databases` (ioredis would only log its SELECT's failure and
 * use database 0 until each command failed); an unreachable Redis is waited for, as a service started before its
 * Redis should, and said (onUnreachable). A Cluster is probed through its first seed node.
 */
export async function checkRedisAccess(target: RedisTarget | string, opts: AccessCheckOptions = {}): Promise<void> {
  const resolved: RedisTarget = typeof target === 'string' ? { mode: 'single', url: target } : target;
  const probe = resolved.mode === 'cluster'
    ? new Redis({ ...resolved.nodes[0]!, maxRetriesPerRequest: null, lazyConnect: true, connectionName: 'cadre-preflight', ...credentials(resolved), ...(resolved.tls ? { tls: {} } : {}) })
    : open(resolved, 'cadre-preflight', {}, true);
  const unreachable = new UnreachableReport(resolved, opts.onUnreachable);
  try {
    await new Promise<void>((resolve, reject) => {
      probe.on('error', (err: Error) => {
        const variable = credentialsVariable(resolved);
        if (AUTH_REFUSED.test(err.message)) reject(new RedisAccessError(`Redis refused the credentials in ${variable} (${err.message.split(/\s/)[0]!}); check the password (it is not shown here)`, variable));
        else if (DB_OUT_OF_RANGE.test(err.message)) reject(new RedisAccessError(`Redis has no database ${(probe as Redis).options.db} (ERR DB index is out of range): use one below the server's "databases" setting (16 by default: 0 to 15)`, databaseVariable(resolved)));
        else unreachable.failed(err);
      });
      probe.once('ready', () => resolve());
      probe.connect().catch(() => undefined);
    }).finally(() => unreachable.stop());
    await checkFunctionAccess(resolved, probe);
  } finally {
    probe.disconnect();
  }
}

/**
 * checkRedisAccess's lines while Redis cannot be reached: the first failure at once, then at most one line every
 * UNREACHABLE_REPORT_EVERY_MS with the latest failure; and one after UNREACHABLE_FIRST_SILENCE_MS, then at that rate,
 * if attempts neither succeed nor fail (a TLS client facing a plain Redis: no answer until the connect timeout).
 * The reason is the error's code (ECONNREFUSED, ENOTFOUND, ETIMEDOUT) or, without one, its message's first line:
 * neither carries the password (refused credentials are not reported here: they end the check).
 */
class UnreachableReport {
  private last: Error | undefined;
  private reportedAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly target: RedisTarget;
  private readonly onUnreachable: ((problem: string) => void) | undefined;

  constructor(target: RedisTarget, onUnreachable?: (problem: string) => void) {
    this.target = target;
    this.onUnreachable = onUnreachable;
    if (onUnreachable) this.schedule();
  }

  failed(err: Error): void {
    if (this.stopped) return;
    this.last = err;
    if (Date.now() - this.reportedAt >= UNREACHABLE_REPORT_EVERY_MS) this.report();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(ms = UNREACHABLE_FIRST_SILENCE_MS): void {
    this.timer = setTimeout(() => {
      if (Date.now() - this.reportedAt >= UNREACHABLE_REPORT_EVERY_MS) this.report();
      this.schedule(UNREACHABLE_REPORT_EVERY_MS);
    }, ms);
    this.timer.unref();
  }

  private report(): void {
    if (!this.onUnreachable) return;
    this.reportedAt = Date.now();
    const err = this.last;
    const tls = this.target.mode === 'single' ? this.target.url.startsWith('rediss:') : this.target.tls;
    const why = err ? ((err as NodeJS.ErrnoException).code ?? err.message.split('\n')[0]!.slice(0, 200)) : `no answer yet${tls ? '; does it speak TLS?' : ''}`;
    this.onUnreachable(`${modeVariable(this.target)}: cannot reach ${describeRedisTarget(this.target)} (${why}); retrying`);
  }
}

/** The variable that says where Redis is. */
function modeVariable(target: RedisTarget): string {
  switch (target.mode) {
    case 'single':
      return 'REDIS_URL';
    case 'cluster':
      return 'REDIS_CLUSTER_NODES';
    case 'sentinel':
      return 'REDIS_SENTINELS';
  }
}

/** A name no library has: FCALL of it answers "Function not found" to a user the ACL lets call functions. */
const NO_SUCH_FUNCTION = 'cadre_access_check';

/**
 * The store runs as a Redis Functions library: a user whose ACL predates it (EVAL and EVALSHA only) would pass the
 * password check and then fail every store call. So start-up loads the library on every master (the first calls
 * then find it) and makes an FCALL, which the ACL refuses (NOPERM) before looking the function up. Any other
 * failure is left to the first store call, which loads the library itself.
 */
async function checkFunctionAccess(target: RedisTarget, probe: RedisClient): Promise<void> {
  const client = target.mode === 'cluster' ? open(target, 'cadre-preflight', {}, true) : probe;
  try {
    if (client !== probe) await client.connect();
    await loadStoreLibrary(client);
    await client.call('FCALL', NO_SUCH_FUNCTION, 0).catch((err: Error) => {
      if (!/^ERR Function not found/.test(err.message)) throw err;
    });
  } catch (err) {
    if (!(err instanceof Error && /^NOPERM/.test(err.message))) return;
    const refused = /'([^']+)'/.exec(err.message)?.[1] ?? 'a command';
    const variable = target.mode === 'single' ? 'REDIS_URL' : 'REDIS_USERNAME';
    throw new RedisAccessError(`the Redis user may not run '${refused}' (NOPERM): Cadre's store is a Redis Functions library, so the user needs +fcall +function|load (ACL SETUSER <user> +fcall +function|load)`, variable);
  } finally {
    if (client !== probe) client.disconnect();
  }
}

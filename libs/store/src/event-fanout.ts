import type { RedisClient } from './connect.ts';
import { entryOf, parseAppendNotice, type AppendNotice, type StreamEntry } from './event-codec.ts';
import type { KeyBuilder } from './keys.ts';

/** Any event with a seq: team events of a task, run events of a run. */
export interface LoggedEvent {
  seq: number;
  /** When the append script wrote it (ISO, Redis's clock). */
  timestamp?: string;
}

/** One event log as the fan-out sees it (a task's or a run's); built by the store that owns it. */
export interface WatchableLog<E extends LoggedEvent> {
  /** The id appends publish (`<id> <seq>`) on the log's channel. */
  id: string;
  /** The shard channel its appends are announced on (SPUBLISH, in the log's slot); several logs may share one. */
  channel: string;
  /** Events with seq > afterSeq, at most `limit`; null when the log is gone; throws cursor_expired. */
  read(afterSeq: number, limit: number): Promise<E[] | null>;
  /**
   * An entry as the log's own reads decode it: a tail decodes the entry an append notification carries with this,
   * so a pushed event is the same as a read one.
   */
  decode(entry: StreamEntry): E;
  /** The tail's read of entries it was just told about: no existence or retention checks, one command. */
  readLive?(afterSeq: number, limit: number): Promise<E[]>;
  /** The last seq appended. */
  head(): Promise<number>;
  /**
   * The last seq appended and the events after `afterSeq` (at most `limit`), in one round trip, without
   * retention checks; null when the log is gone (its meta key does not exist). A new tail's start, which also gives
   * its first watcher its catch-up, and the tail's safety poll, which so finds a log that vanished (expired,
   * evicted, lost in a failover) and ends its watchers. A log without it is never found gone by its tail.
   */
  headAndPage?(afterSeq: number, limit: number): Promise<{ head: number; events: E[] } | null>;
  /** The event after which readers are done. */
  isTerminal(event: E): boolean;
}

/**
 * `headAndPage` for a log kept as a meta hash (field `seq`, written when the log is created) and a stream with
 * entry ids `<seq>-0`: both read in one MULTI (the two keys share the log's slot). No `seq` means no meta hash.
 */
export async function readHeadAndPage<E extends LoggedEvent>(
  redis: RedisClient, metaKey: string, eventsKey: string, decode: (entry: StreamEntry) => E, afterSeq: number, limit: number,
): Promise<{ head: number; events: E[] } | null> {
  const replies = await redis.multi().hget(metaKey, 'seq').xrange(eventsKey, `(${afterSeq}-0`, '+', 'COUNT', limit).exec();
  const [[seqErr, seq], [rangeErr, entries]] = replies as [[Error | null, string | null], [Error | null, StreamEntry[]]];
  if (seqErr) throw seqErr;
  if (rangeErr) throw rangeErr;
  if (seq === null) return null;
  return { head: Number(seq), events: entries.map(decode) };
}

/**
 * Shares one Redis tail per log among every watcher in this process (DESIGN invariant 3).
 *
 * Appends SPUBLISH `<logId> <seq>` and the entry itself (up to a size cap; see event-codec.ts, AppendNotice) on
 * the log's shard channel (Redis 7 sharded pub/sub: the channel lives in the log's slot). This process SSUBSCRIBEs
 * to a channel only while it watches a log announced there, so what it hears grows with what it watches, not with
 * all traffic; on a Cluster each notification comes from the one node that holds the log. A tail that is caught up
 * (the notice is for its cursor + 1) decodes the entry the notice carries and pushes it to all of its watchers with
 * no Redis read. Any other notice (a gap: one was lost or is still being read; an entry above the cap; a tail not
 * started yet) wakes the tail, which reads the new entries once (XRANGE from its cursor) and pushes them. So
 * steady-state Redis reads grow with gaps and polls, not with appends or watchers. A tail keeps the last page of
 * events it read: a watcher whose cursor falls inside that page starts from it without a read (the first watcher
 * of a log too, when the log can read its head and the page after the cursor together). A watcher that starts
 * before that page, or falls behind the tail, catches up from the log itself: the log is the truth, pushes and the
 * kept page only save reads.
 */
export interface FanoutOptions {
  keys: KeyBuilder;
  /** A dedicated connection: it is put in subscriber mode (on a Cluster: opened with `shardedSubscriber`). */
  subscriber: RedisClient;
  /** Events a caught-up watcher may hold undelivered before it is closed as too slow. */
  watcherBufferLimit?: number;
  /** A tail re-reads this often even without a notification, in case one was lost (e.g. on reconnect). */
  safetyPollMs?: number;
  pageSize?: number;
  /**
   * A live event (pushed by a tail, not read while catching up) handed straight to the caught-up watchers: once per
   * event per tail, after the tail wrote it to the last of them (to a pipeTo stream, or woke a waiting for-await
   * reader); not once per watcher, which cost a timestamp parse and a histogram observe per delivery. Events no
   * watcher took straight are not reported here: see onLateDelivery.
   */
  onLiveDelivery?: (event: LoggedEvent) => void;
  /**
   * Live events a watcher took later from its buffer (its stream was full, or its reader was busy): once per batch
   * pipeTo writes — the batch's oldest event, after the batch's last write — or once per event a for-await reader takes.
   */
  onLateDelivery?: (event: LoggedEvent) => void;
  /**
   * Told when a tail's read fails (Redis down, failing over), once per outage of that tail, and when it reads
   * again; a pino logger fits. Watchers are unaffected: they catch up from the log themselves.
   */
  logger?: FanoutLogger;
}

/** The part of a (pino) logger the fan-out uses. */
export interface FanoutLogger {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

/** What every stream a draining gateway ends says: its watchers here, and the gateway's gRPC and /ws edges. */
export const GATEWAY_SHUTTING_DOWN = 'gateway is shutting down';

/** A watch of a log that no longer exists ends with this; the edges answer it as not found. */
function logGone(log: { id: string }, lastSeq: number): WatchClosedError {
  return new WatchClosedError('log_gone', lastSeq, `the event log ${log.id} no longer exists (expired, evicted by retention, or lost in a Redis failover); it cannot be resumed`);
}

/**
 * Why a watch ended early. `watcher_overflow` and `shutting_down` are resumable from `lastSeq`; `log_gone` is not:
 * the log no longer exists (its keys expired, were evicted by retention, or were lost in a Redis failover).
 */
export class WatchClosedError extends Error {
  readonly code: 'watcher_overflow' | 'shutting_down' | 'log_gone';
  readonly lastSeq: number;
  constructor(code: WatchClosedError['code'], lastSeq: number, message: string) {
    super(message);
    this.name = 'WatchClosedError';
    this.code = code;
    this.lastSeq = lastSeq;
  }
}

export class EventFanout {
  private readonly keys: KeyBuilder;
  private readonly subscriber: RedisClient;
  private readonly tails = new Map<string, LogTail<LoggedEvent>>();
  private readonly bufferLimit: number;
  private readonly safetyPollMs: number;
  readonly pageSize: number;
  /** @internal */
  readonly logger: FanoutLogger | undefined;
  private readonly onLiveDelivery: ((event: LoggedEvent) => void) | undefined;
  private readonly onLateDelivery: ((event: LoggedEvent) => void) | undefined;
  private closed = false;
  /** Redis reads made by tails (not by catching-up watchers); exposed for metrics and the fan-out bench. */
  tailReads = 0;
  /** Events tails took from the notifications that announced them, with no read (metrics, the fan-out bench). */
  entriesCarried = 0;
  /** Appends announced to this process since start: those to the logs it watches (or watched). */
  appendsSeen = 0;
  /** Tails per subscribed channel: the channel is left when its last tail goes. */
  private readonly channelUsers = new Map<string, number>();

  constructor(opts: FanoutOptions) {
    this.keys = opts.keys;
    this.subscriber = opts.subscriber;
    this.bufferLimit = opts.watcherBufferLimit ?? 1024;
    this.safetyPollMs = opts.safetyPollMs ?? 2000;
    this.pageSize = opts.pageSize ?? 500;
    this.logger = opts.logger;
    this.onLiveDelivery = opts.onLiveDelivery;
    this.onLateDelivery = opts.onLateDelivery;
  }

  async start(): Promise<void> {
    this.subscriber.on('smessage', (_channel: string, message: string) => {
      this.appendsSeen++;
      const notice = parseAppendNotice(message);
      this.tails.get(notice.logId)?.hear(notice);
    });
    // After a reconnect (or a failover), notifications sent meanwhile are gone: every tail re-reads. ioredis
    // subscribes again to the channels it was on.
    this.subscriber.on('ready', () => {
      for (const tail of this.tails.values()) tail.wake(Infinity);
    });
  }

  /** @internal A tail's channel: subscribed before the tail reads its head, so no append falls between the two. */
  async join(channel: string): Promise<void> {
    const users = this.channelUsers.get(channel) ?? 0;
    this.channelUsers.set(channel, users + 1);
    if (users === 0 || this.pending.has(channel)) {
      let subscribing = this.pending.get(channel);
      if (!subscribing) {
        subscribing = this.subscriber.ssubscribe(channel).then(() => undefined).finally(() => this.pending.delete(channel));
        this.pending.set(channel, subscribing);
      }
      try {
        await subscribing;
      } catch (err) {
        this.leave(channel);
        throw err;
      }
    }
  }

  private readonly pending = new Map<string, Promise<void>>();

  /** @internal */
  leave(channel: string): void {
    const users = (this.channelUsers.get(channel) ?? 1) - 1;
    if (users > 0) {
      this.channelUsers.set(channel, users);
      return;
    }
    this.channelUsers.delete(channel);
    if (!this.closed) this.subscriber.sunsubscribe(channel).catch(() => undefined);
  }

  /** Shard channels this process listens on (metrics, tests). */
  subscribedChannels(): number {
    return this.channelUsers.size;
  }

  /** Closes every watcher with a resumable `shutting_down` error and stops listening. */
  async close(): Promise<void> {
    this.closed = true;
    for (const tail of this.tails.values()) tail.closeAll();
    this.tails.clear();
    await this.subscriber.quit().catch(() => undefined);
  }

  watcherCount(): number {
    let n = 0;
    for (const tail of this.tails.values()) n += tail.watchers.size;
    return n;
  }

  /**
   * Events of `log` with seq > afterSeq, live, ending after its terminal event. The caller has checked that the
   * log exists and may be read. Iterate it; `return()` (or breaking the loop) unregisters.
   */
  async watch<E extends LoggedEvent>(log: WatchableLog<E>, afterSeq: number): Promise<LogWatcher<E>> {
    if (this.closed) throw new WatchClosedError('shutting_down', afterSeq, GATEWAY_SHUTTING_DOWN);
    let tail = this.tails.get(log.id) as LogTail<E> | undefined;
    if (!tail) {
      tail = new LogTail<E>(this, log, afterSeq, () => {
        this.tails.delete(log.id);
        this.leave(log.channel);
      });
      this.tails.set(log.id, tail as unknown as LogTail<LoggedEvent>);
    }
    // The tail's cursor must be set before the watcher's first read of the log, or an event appended between
    // the two could be missed by both.
    try {
      await tail.ready;
    } catch (err) {
      // A failed start (Redis loading, failing over) must not stay cached: the next watch builds a new tail.
      if (this.tails.get(log.id) === tail) this.tails.delete(log.id);
      throw err;
    }
    // The log vanished after the caller checked it (the tail's start or poll found no meta key): nothing to wait for.
    if (tail.gone) throw logGone(log, afterSeq);
    const owner = tail;
    const watcher: LogWatcher<E> = new LogWatcher<E>(log, afterSeq, tail.head, this.bufferLimit, this.pageSize, () => owner.remove(watcher), this.onLateDelivery, tail.recentAfter(afterSeq));
    tail.watchers.add(watcher);
    return watcher;
  }

  /** @internal A tail has written `event` straight to its caught-up watchers' streams. */
  handedOff(event: LoggedEvent): void {
    this.onLiveDelivery?.(event);
  }

  /** @internal */
  countTailRead(): void {
    this.tailReads++;
  }

  /** @internal */
  countEntryCarried(): void {
    this.entriesCarried++;
  }

  /** @internal */
  get pollMs(): number {
    return this.safetyPollMs;
  }
}

/** One per watched log per process: reads each new event once and pushes it to every local watcher. */
class LogTail<E extends LoggedEvent> {
  readonly watchers = new Set<LogWatcher<E>>();
  readonly ready: Promise<void>;
  /** The last seq this tail has read (or found at start): the log holds at least this much. */
  get head(): number {
    return this.cursor;
  }
  /** The log is gone: a watch of it ends at once (`log_gone`). */
  get gone(): boolean {
    return this.vanished;
  }
  private cursor = 0;
  /** The events this tail read last, contiguous: every event with seq in (recentFrom, recentFrom + recent.length]. */
  private recent: E[] = [];
  private recentFrom = 0;
  private isReady = false;
  private reading = false;
  private scheduled = false;
  private again = false;
  private ended = false;
  /** The log's meta key was found missing: every watcher was ended with `log_gone` and no new one may join. */
  private vanished = false;
  /** The safety poll is due: the next read also asks whether the log still exists. */
  private pollDue = false;
  private poll: NodeJS.Timeout | undefined;
  /** Reads failed in a row: the first is logged, the rest are the same outage until a read succeeds. */
  private failedReads = 0;
  private readonly fanout: EventFanout;
  private readonly log: WatchableLog<E>;
  private readonly onEmpty: () => void;

  /** `firstAfterSeq`: the cursor of the watcher the tail is made for (its catch-up is read with the head). */
  constructor(fanout: EventFanout, log: WatchableLog<E>, firstAfterSeq: number, onEmpty: () => void) {
    this.fanout = fanout;
    this.log = log;
    this.onEmpty = onEmpty;
    this.ready = fanout.join(log.channel).then(async () => {
      fanout.countTailRead();
      let start: { head: number; events: E[] } | null;
      try {
        start = log.headAndPage ? await log.headAndPage(firstAfterSeq, fanout.pageSize) : { head: await log.head(), events: [] };
      } catch (err) {
        fanout.leave(log.channel);
        throw err;
      }
      if (!start) return this.vanish();
      this.recentFrom = firstAfterSeq;
      for (const event of start.events) this.remember(event);
      this.cursor = start.head;
      this.isReady = true;
      this.schedulePoll();
      if (this.again) this.wake(Infinity);
    });
  }

  /** An append notification: the entry it carries is the next one, or else the tail reads from its cursor. */
  hear(notice: AppendNotice): void {
    const event = this.isNext(notice.seq) ? this.decodeCarried(notice) : undefined;
    if (!event) {
      this.wake(notice.seq);
      return;
    }
    this.fanout.countEntryCarried();
    this.deliver(event);
  }

  /** `seq` follows the cursor and nothing is being read or about to be: taking it now keeps the order. */
  private isNext(seq: number): boolean {
    return seq === this.cursor + 1 && this.isReady && !this.reading && !this.scheduled && !this.ended;
  }

  private decodeCarried(notice: AppendNotice): E | undefined {
    const entry = entryOf(notice);
    if (!entry) return undefined;
    try {
      return this.log.decode(entry);
    } catch {
      // Not what the append wrote (a foreign publisher on the channel?): the log is the truth, read it there.
      return undefined;
    }
  }

  wake(seq: number): void {
    if (this.ended || seq <= this.cursor) return;
    if (this.reading || this.scheduled || !this.isReady) {
      this.again = true;
      return;
    }
    // Read on the next turn: notifications parsed from the same socket read coalesce into one XRANGE.
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.read();
    });
  }

  private async read(): Promise<void> {
    this.reading = true;
    try {
      do {
        this.again = false;
        // Only the safety poll asks whether the log still exists: reads caused by appends stay one XRANGE.
        let checkExists = this.pollDue && this.log.headAndPage !== undefined;
        this.pollDue = false;
        let page: E[];
        do {
          this.fanout.countTailRead();
          if (checkExists) {
            checkExists = false;
            const found = await this.log.headAndPage!(this.cursor, this.fanout.pageSize);
            // Redis answered that the log's meta key does not exist (a failed read throws instead and ends nobody).
            if (!found) return this.vanish();
            page = found.events;
          } else {
            page = (await (this.log.readLive ?? this.log.read).call(this.log, this.cursor, this.fanout.pageSize)) ?? [];
          }
          for (const event of page) this.deliver(event);
        } while (page.length === this.fanout.pageSize);
      } while (this.again && !this.ended);
      if (this.failedReads > 0) {
        this.fanout.logger?.info({ logId: this.log.id, cursor: this.cursor, failedReads: this.failedReads }, 'event tail reads again');
        this.failedReads = 0;
      }
    } catch (err) {
      // Retried by the safety poll (and the next notification); watchers still catch up from the log themselves.
      if (this.failedReads++ === 0) {
        const reason = err instanceof Error ? err.message : String(err);
        this.fanout.logger?.warn({ logId: this.log.id, cursor: this.cursor, watchers: this.watchers.size, err: reason }, 'event tail read failed; retrying on the safety poll');
      }
    } finally {
      this.reading = false;
    }
  }

  /** The next event, read or carried: the cursor moves past it and every watcher gets it. */
  private deliver(event: E): void {
    this.cursor = event.seq;
    this.remember(event);
    let handed = false;
    for (const w of this.watchers) if (w.push(event)) handed = true;
    if (handed) this.fanout.handedOff(event);
    if (this.log.isTerminal(event)) this.ended = true;
  }

  /** Keeps `event` in the recent page: it continues the page, or (after a gap) starts a new one. Bounded. */
  private remember(event: E): void {
    if (event.seq !== this.recentFrom + this.recent.length + 1) {
      this.recent = [];
      this.recentFrom = event.seq - 1;
    }
    this.recent.push(event);
    const keep = this.fanout.pageSize;
    if (this.recent.length >= 2 * keep) {
      this.recent = this.recent.slice(-keep);
      this.recentFrom = this.recent[0]!.seq - 1;
    }
  }

  /**
   * The kept events after `afterSeq` when the page holds the next one (so nothing is skipped), or none when
   * `afterSeq` is the tail's cursor at the page's end (nothing to catch up); else undefined: read the log.
   */
  recentAfter(afterSeq: number): E[] | undefined {
    const skip = afterSeq - this.recentFrom;
    const atEnd = skip === this.recent.length && afterSeq === this.cursor;
    return skip >= 0 && (skip < this.recent.length || atEnd) ? this.recent.slice(skip) : undefined;
  }

  private schedulePoll(): void {
    if (this.ended) return;
    this.poll = setTimeout(() => {
      this.pollDue = true;
      this.wake(Infinity);
      this.schedulePoll();
    }, this.fanout.pollMs);
    this.poll.unref();
  }

  remove(watcher: LogWatcher<E>): void {
    this.watchers.delete(watcher);
    if (this.watchers.size === 0) {
      clearTimeout(this.poll);
      this.onEmpty();
    }
  }

  /**
   * The log no longer exists (it expired, was evicted, or was lost in a failover): nothing more will be appended,
   * so every watcher ends now with `log_gone` rather than wait for ever, and the tail goes.
   */
  private vanish(): void {
    this.vanished = true;
    this.ended = true;
    clearTimeout(this.poll);
    const watchers = [...this.watchers];
    if (watchers.length > 0) this.fanout.logger?.info({ logId: this.log.id, cursor: this.cursor, watchers: watchers.length }, 'event log is gone; its watchers end (log_gone)');
    // Each failed watcher unregisters, and the last one's leaving lets the tail go; a tail found gone at its start has none.
    for (const w of watchers) w.fail(logGone(this.log, w.lastSeq));
    if (watchers.length === 0) this.onEmpty();
  }

  closeAll(): void {
    clearTimeout(this.poll);
    for (const w of this.watchers) w.fail(new WatchClosedError('shutting_down', w.lastSeq, GATEWAY_SHUTTING_DOWN));
  }
}

/**
 * One reader's view: an async iterator over events after its cursor. Events pushed by the tail wait in a bounded
 * buffer; when the reader is behind the buffer it reads pages from the log instead.
 */
export class LogWatcher<E extends LoggedEvent> implements AsyncIterableIterator<E> {
  /** The seq of the last event handed to the reader: where it resumes from. */
  lastSeq: number;
  private live: E[] = [];
  private page: E[] = [];
  private done = false;
  private error: Error | undefined;
  private wakeReader: (() => void) | undefined;
  private readonly log: WatchableLog<E>;
  private readonly bufferLimit: number;
  private readonly pageSize: number;
  private readonly unregister: () => void;
  private firstRead = true;
  /** pipeTo's writer while the reader is caught up: the tail's pushes go straight to it. */
  private sink: { write(event: E): boolean } | undefined;
  /** The sink refused an event (its stream is full): pipeTo waits for it to drain. */
  private sinkFull = false;
  /** The highest seq the tail has pushed: the log holds at least this much. */
  private knownHead = 0;

  private readonly onLateDelivery: ((event: LoggedEvent) => void) | undefined;
  /** The first event taken late from the live buffer since the last lag report. */
  private lateFrom: E | undefined;
  /** The live event pushed while the reader waited for it (the tail reports that one): not late when taken. */
  private straightSeq = 0;

  /** `start`: the events after `afterSeq` the tail already holds (from the next one on): no first read then. */
  constructor(log: WatchableLog<E>, afterSeq: number, head: number, bufferLimit: number, pageSize: number, unregister: () => void, onLateDelivery?: (event: LoggedEvent) => void, start?: E[]) {
    this.onLateDelivery = onLateDelivery;
    if (start) {
      this.page = start;
      this.firstRead = false;
    }
    this.log = log;
    this.lastSeq = afterSeq;
    this.knownHead = head;
    this.bufferLimit = bufferLimit;
    this.pageSize = pageSize;
    this.unregister = unregister;
  }

  /** @internal Called by the tail; true when the event went straight to pipeTo's writer or a waiting reader (the tail reports those). */
  push(event: E): boolean {
    if (this.done || event.seq <= this.lastSeq) return false;
    this.knownHead = Math.max(this.knownHead, event.seq);
    if (this.sink && event.seq === this.lastSeq + 1 && this.live.length === 0 && this.page.length === 0) {
      this.hand(event);
      if (!this.sink.write(event)) {
        this.sink = undefined;
        this.sinkFull = true;
        this.wakeReader?.();
      } else if (this.done) this.wakeReader?.();
      return true;
    }
    const straight = this.wakeReader !== undefined && event.seq === this.lastSeq + 1 && this.live.length === 0 && this.page.length === 0;
    if (straight) this.straightSeq = event.seq;
    this.live.push(event);
    if (this.live.length > this.bufferLimit) {
      // Held events that join what the reader already has mean the reader is the bottleneck: close it.
      // Held events beyond a gap mean it is still catching up from the log, which has them anyway: drop them.
      const edge = this.page.at(-1)?.seq ?? this.lastSeq;
      if (this.live[0]!.seq <= edge + 1) {
        this.fail(new WatchClosedError('watcher_overflow', this.lastSeq, `watcher fell more than ${this.bufferLimit} events behind; resume with after_seq=${this.lastSeq}`));
        return false;
      }
      this.live = [];
    }
    this.wakeReader?.();
    return straight;
  }

  /** @internal */
  fail(error: Error): void {
    if (this.done || this.error) return;
    this.error = error;
    this.live = [];
    this.page = [];
    // Stop receiving pushes now, not when the (slow) reader gets round to reading the error.
    this.unregister();
    this.wakeReader?.();
    for (const listener of this.failureListeners) listener(error);
  }

  private readonly failureListeners = new Set<(error: Error) => void>();

  /**
   * Calls `listener` if the watch is closed early (overflow, shutdown, its log gone) — also while its reader is blocked
   * elsewhere, e.g. waiting for a slow client's `drain`. Returns a function that removes the listener.
   */
  onFailure(listener: (error: Error) => void): () => void {
    if (this.error) {
      listener(this.error);
      return () => undefined;
    }
    this.failureListeners.add(listener);
    return () => this.failureListeners.delete(listener);
  }

  async next(): Promise<IteratorResult<E>> {
    const result = await this.advance();
    this.reportLate();
    return result;
  }

  /** next() without the lag report: pipeTo reports once per batch it writes. */
  private async advance(): Promise<IteratorResult<E>> {
    while (true) {
      if (this.error) {
        const error = this.error;
        this.finish();
        throw error;
      }
      if (this.done) return { done: true, value: undefined };
      const event = this.take();
      if (event) return { done: false, value: this.hand(event) };
      // Nothing contiguous in memory: read the log if it holds more (first read, a gap, dropped events), else wait.
      if (this.firstRead || this.knownHead > this.lastSeq) {
        this.firstRead = false;
        let page: E[] | null;
        try {
          page = await this.log.read(this.lastSeq, this.pageSize);
        } catch (err) {
          // cursor_expired or Redis down: the watch is over; unregister before the caller sees the error.
          this.finish();
          throw err;
        }
        if (!page) {
          // The log vanished before the tail's next safety poll found it out: the watch ends the same way.
          this.finish();
          throw logGone(this.log, this.lastSeq);
        }
        this.page = page;
        // A full page may have more behind it. Appends are atomic, so the log always has what the tail pushed;
        // an empty page means nothing is pending (guards against spinning on a stale head).
        if (page.length === this.pageSize) this.knownHead = Math.max(this.knownHead, page.at(-1)!.seq + 1);
        if (page.length === 0) this.knownHead = this.lastSeq;
        continue;
      }
      await this.waitForPush();
    }
  }

  /**
   * Hands every event to `write`, in order, until the watch is over (resolves) or closed early (throws as next()
   * does). While the reader is caught up, the tail's pushes call `write` at once: no async step per event per
   * watcher. `write` returning false (the stream's buffer is full) stops that until `writable()` resolves; events
   * pushed meanwhile wait in the bounded buffer, as they do for next().
   */
  async pipeTo(write: (event: E) => boolean, writable: () => Promise<void>): Promise<void> {
    for (;;) {
      const first = await this.advance();
      if (first.done) return;
      let open = write(first.value);
      while (open) {
        const event = this.takeHeld();
        if (!event) break;
        open = write(event);
      }
      this.reportLate();
      if (!open) {
        await writable();
        continue;
      }
      if (this.done || this.error || this.knownHead > this.lastSeq || this.live.length > 0 || this.page.length > 0) continue;
      this.sink = { write };
      await this.waitForPush();
      this.sink = undefined;
      if (this.sinkFull) {
        this.sinkFull = false;
        await writable();
      }
    }
  }

  /** The next event held in memory, handed to the reader; undefined when none is (or the watch is over). */
  private takeHeld(): E | undefined {
    if (this.done || this.error) return undefined;
    const event = this.take();
    return event && this.hand(event);
  }

  /** `event` goes to the reader: its cursor moves past it, and the watch is over after the terminal event. */
  private hand(event: E): E {
    this.lastSeq = event.seq;
    if (this.log.isTerminal(event)) this.finish();
    return event;
  }

  private take(): E | undefined {
    const want = this.lastSeq + 1;
    while (this.page.length > 0 && this.page[0]!.seq < want) this.page.shift();
    if (this.page[0]?.seq === want) return this.page.shift();
    while (this.live.length > 0 && this.live[0]!.seq < want) this.live.shift();
    if (this.live[0]?.seq !== want) return undefined;
    const event = this.live.shift()!;
    if (event.seq !== this.straightSeq) this.lateFrom ??= event;
    return event;
  }

  /** The oldest live event taken from the buffer since the last report, reported now (its lag is the batch's largest). */
  private reportLate(): void {
    const event = this.lateFrom;
    if (!event) return;
    this.lateFrom = undefined;
    this.onLateDelivery?.(event);
  }

  private waitForPush(): Promise<void> {
    return new Promise((resolve) => {
      this.wakeReader = () => {
        this.wakeReader = undefined;
        resolve();
      };
    });
  }

  private finish(): void {
    if (this.done) return;
    this.done = true;
    this.live = [];
    this.page = [];
    if (!this.error) this.unregister();
    this.failureListeners.clear();
  }

  async return(): Promise<IteratorResult<E>> {
    this.finish();
    this.wakeReader?.();
    return { done: true, value: undefined };
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}

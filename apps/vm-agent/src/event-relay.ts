import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '@cadre/observability';
import { backoffDelay } from './backoff.ts';
import { GatewayError, type GatewayClient, type RelayedEvent } from './gateway-client.ts';

export interface EventRelayOptions {
  client: Pick<GatewayClient, 'relay'>;
  runId: string;
  workerId: string;
  leaseId: string;
  logger: Logger;
  /** The gateway answered 409/404: this worker no longer holds the run (its lease was lost). Nothing more is sent. */
  onFenced(err: GatewayError): void;
  flushMs?: number;
  maxBatch?: number;
  maxRetryDelayMs?: number;
}

const SOURCE = 'vm-agent';

/**
 * Relays a run's events in order: buffered, flushed every `flushMs` or as soon as `maxBatch` are queued, one
 * request in flight. A batch that fails for want of a gateway is retried with backoff (so an event may be stored
 * twice when only the answer was lost); nothing is sent before `start()` (the run must be dispatched first).
 */
export class EventRelay {
  private readonly opts: EventRelayOptions;
  private readonly flushMs: number;
  private readonly maxBatch: number;
  private queue: RelayedEvent[] = [];
  private timer: ReturnType<typeof setTimeout> | null = null;
  private flushing: Promise<void> | null = null;
  private started = false;
  private stopped = false;
  private fenced = false;
  private readonly discardSignal = new AbortController();

  constructor(opts: EventRelayOptions) {
    this.opts = opts;
    this.flushMs = opts.flushMs ?? 100;
    this.maxBatch = opts.maxBatch ?? 50;
  }

  push(eventType: string, payload: unknown): void {
    if (this.stopped) return;
    this.queue.push({ event_type: eventType, source: SOURCE, payload });
    this.schedule();
  }

  start(): void {
    this.started = true;
    this.schedule();
  }

  /** Sends everything queued; true when it all arrived, false when the run was fenced or the relay discarded. */
  async drain(): Promise<boolean> {
    while (this.queue.length > 0 && !this.stopped) {
      this.kick();
      await this.flushing;
    }
    await this.flushing;
    return !this.stopped;
  }

  /** Drops what is queued and sends nothing more (the run was stopped or handed back). */
  discard(): void {
    this.stopped = true;
    this.queue = [];
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.discardSignal.abort();
  }

  get wasFenced(): boolean {
    return this.fenced;
  }

  private schedule(): void {
    if (!this.started || this.stopped || this.queue.length === 0) return;
    if (this.queue.length >= this.maxBatch) this.kick();
    else this.timer ??= setTimeout(() => this.kick(), this.flushMs);
  }

  private kick(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.flushing ??= this.flushAll().finally(() => (this.flushing = null));
  }

  private async flushAll(): Promise<void> {
    let failures = 0;
    // A batch keeps its id and contents until the gateway took it, so a retry after a lost reply is recognised
    // (batch_id) and not stored twice.
    let batch: { id: string; events: RelayedEvent[] } | null = null;
    while (this.queue.length > 0 && !this.stopped) {
      const current: { id: string; events: RelayedEvent[] } = (batch ??= { id: randomUUID(), events: this.queue.slice(0, this.maxBatch) });
      try {
        await this.opts.client.relay(this.opts.runId, this.opts.workerId, this.opts.leaseId, current.events, current.id);
        failures = 0;
        // Only now: a discard() during the request has already emptied the queue.
        if (!this.stopped) this.queue.splice(0, current.events.length);
        batch = null;
      } catch (err) {
        if (this.stopped) return;
        if (err instanceof GatewayError && err.code === 'fenced') {
          this.fenced = true;
          this.discard();
          this.opts.onFenced(err);
          return;
        }
        if (err instanceof GatewayError && err.code === 'rejected') {
          // Retrying cannot help (a bug or a configuration problem); keep the rest of the log flowing.
          this.opts.logger.error({ err: err.message, dropped: current.events.map((e) => e.event_type) }, 'gateway refused relayed events');
          this.queue.splice(0, current.events.length);
          batch = null;
          continue;
        }
        failures++;
        const delay = backoffDelay(failures, { baseMs: 200, maxMs: this.opts.maxRetryDelayMs ?? 5_000 });
        this.opts.logger.warn({ err: (err as Error).message, retryInMs: delay }, 'relaying events failed; retrying');
        await sleep(delay, undefined, { signal: this.discardSignal.signal }).catch(() => {});
      }
    }
  }
}

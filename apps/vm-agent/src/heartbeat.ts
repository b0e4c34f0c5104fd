import type { Logger } from '@cadre/observability';
import { backoffDelay, jittered } from './backoff.ts';
import type { GatewayClient, HeartbeatRequest, HeartbeatResponse } from './gateway-client.ts';

export interface HeartbeatLoopOptions {
  client: Pick<GatewayClient, 'heartbeat'>;
  identity: Omit<HeartbeatRequest, 'status' | 'metadata' | 'acked_command_ids'>;
  logger: Logger;
  /** Read before every beat. */
  status(): HeartbeatRequest['status'];
  metadata?(): Record<string, unknown>;
  /** Called with every answer; must not block (the executor works asynchronously). */
  onResponse(res: HeartbeatResponse): void;
  /** Cadence until the server names one. */
  initialIntervalMs?: number;
  /** First retry delay while the gateway is away; doubles up to `maxBackoffMs`. */
  backoffBaseMs?: number;
  maxBackoffMs?: number;
  random?: () => number;
}

/**
 * Beats on the server's cadence (`heartbeat_interval_ms`, ±10% jitter so a fleet does not beat in step) with
 * chained timers, so a slow gateway can never cause overlapping beats. While the gateway is unreachable or
 * answers 5xx, retries back off exponentially up to a cap. Acks ride on the next beat and are dropped only once
 * a beat carrying them succeeded.
 */
export class HeartbeatLoop {
  private readonly opts: HeartbeatLoopOptions;
  private intervalMs: number;
  private failures = 0;
  private beaten = false;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private running = false;
  private inFlight: Promise<void> | null = null;
  private abort = new AbortController();
  private readonly pendingAcks = new Set<string>();

  constructor(opts: HeartbeatLoopOptions) {
    this.opts = opts;
    this.intervalMs = opts.initialIntervalMs ?? 1_000;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.abort = new AbortController();
    this.schedule(0);
  }

  /** No more beats; an in-flight one is abandoned. */
  async stop(): Promise<void> {
    this.running = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.abort.abort();
    await this.inFlight;
  }

  /** Whether the last beat reached the gateway (false before the first one answers). */
  get reachable(): boolean {
    return this.beaten && this.failures === 0;
  }

  /** Acknowledges an applied command on the next beat. */
  ack(commandId: string): void {
    this.pendingAcks.add(commandId);
  }

  private schedule(delayMs: number): void {
    if (!this.running) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.inFlight = this.beat().finally(() => (this.inFlight = null));
    }, delayMs);
  }

  private async beat(): Promise<void> {
    const acked = [...this.pendingAcks];
    let res: HeartbeatResponse;
    try {
      res = await this.opts.client.heartbeat(
        { ...this.opts.identity, status: this.opts.status(), metadata: this.opts.metadata?.() ?? {}, acked_command_ids: acked },
        this.abort.signal,
      );
    } catch (err) {
      if (!this.running) return;
      this.failures++;
      const delay = this.backoffMs();
      const log = { err: (err as Error).message, failures: this.failures, retryInMs: delay };
      if (this.failures === 1) this.opts.logger.warn(log, 'heartbeat failed; backing off');
      else this.opts.logger.debug(log, 'heartbeat failed again');
      this.schedule(delay);
      return;
    }
    if (this.failures > 0) this.opts.logger.info({ failures: this.failures }, 'gateway reachable again');
    this.failures = 0;
    this.beaten = true;
    for (const id of acked) this.pendingAcks.delete(id);
    if (Number.isFinite(res.heartbeat_interval_ms) && res.heartbeat_interval_ms > 0) this.intervalMs = res.heartbeat_interval_ms;
    try {
      this.opts.onResponse(res);
    } catch (err) {
      this.opts.logger.error({ err }, 'handling a heartbeat answer failed');
    }
    this.schedule(this.jitter(this.intervalMs));
  }

  private backoffMs(): number {
    return backoffDelay(this.failures, { baseMs: this.opts.backoffBaseMs ?? 250, maxMs: this.opts.maxBackoffMs ?? 5_000, ...(this.opts.random && { random: this.opts.random }) });
  }

  private jitter(ms: number): number {
    return jittered(ms, this.opts.random);
  }
}

import type { Logger } from '@cadre/observability';
import type { RunStore } from '@cadre/store';

/**
 * Expires the leases of runs whose worker stopped heartbeating, in every workspace, on a chained timer. Every
 * gateway runs one: the Lua pass is idempotent, so replicas only repeat each other's no-ops. (Heartbeats also
 * expire their own workspace's leases, so busy workspaces do not wait for the sweep.)
 */
export class LeaseSweeper {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly store: RunStore;
  private readonly intervalMs: number;
  private readonly logger: Logger;

  constructor(opts: { store: RunStore; intervalMs: number; logger: Logger }) {
    this.store = opts.store;
    this.intervalMs = opts.intervalMs;
    this.logger = opts.logger;
  }

  start(): void {
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.sweep(), this.intervalMs);
    this.timer.unref();
  }

  private async sweep(): Promise<void> {
    try {
      const expired = await this.store.expireLeases();
      if (expired > 0) this.logger.warn({ expired }, 'run leases expired');
    } catch (err) {
      this.logger.error({ err }, 'lease sweep failed');
    }
    this.schedule();
  }
}

import type { Logger } from '@cadre/observability';
import type { RunStore } from '@cadre/store';
import { repeatPass, type RepeatedPass } from '@cadre/lifecycle';

/**
 * Expires the leases of runs whose worker stopped heartbeating, in every workspace, on a chained timer. Every
 * gateway runs one: the Lua pass is idempotent, so replicas only repeat each other's no-ops. (Heartbeats also
 * expire their own workspace's leases, so busy workspaces do not wait for the sweep.)
 */
export class LeaseSweeper {
  private repeat: RepeatedPass | undefined;
  private readonly store: RunStore;
  private readonly intervalMs: number;
  private readonly logger: Logger;

  constructor(opts: { store: RunStore; intervalMs: number; logger: Logger }) {
    this.store = opts.store;
    this.intervalMs = opts.intervalMs;
    this.logger = opts.logger;
  }

  start(): void {
    this.repeat = repeatPass(() => this.sweep(), { intervalMs: this.intervalMs });
  }

  stop(): void {
    void this.repeat?.stop();
  }

  private async sweep(): Promise<void> {
    try {
      const expired = await this.store.expireLeases();
      if (expired > 0) this.logger.warn({ expired }, 'run leases expired');
    } catch (err) {
      this.logger.error({ err }, 'lease sweep failed');
    }
  }
}

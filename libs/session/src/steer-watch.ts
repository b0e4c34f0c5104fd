import type { SessionStore } from '@cadre/store';

/**
 * The immediate steers of one job run of a turn, heard from before its first load: a steer queued after a load is
 * announced here, one queued before it is in that load's `steers_queued` and the boundary delivers it. So a model
 * call starts without a Redis check of its own; only a notice heard while no model call ran costs one.
 */
export class SteerWatch {
  private readonly store: SessionStore;
  private readonly sessionId: string;
  private readonly unwatch: () => void;
  /** The running model call's: aborting it cuts the stream short (the turn goes on with the steer). */
  private current: AbortController | undefined;
  private noticed = false;

  constructor(store: SessionStore, sessionId: string, watch: (sessionId: string, onSteer: () => void) => () => void) {
    this.store = store;
    this.sessionId = sessionId;
    this.unwatch = watch(sessionId, () => this.notice());
  }

  private notice(): void {
    const current = this.current;
    if (!current) {
      this.noticed = true;
      return;
    }
    // A notice counts only while a steer waits: one that arrives late, for a steer a boundary already delivered
    // (the previous call ended as it was sent), must not cut short the answer to that very steer.
    void this.store.steerWaiting(this.sessionId).then((waiting) => waiting && current.abort(new Error('steered')), () => undefined);
  }

  /**
   * A model call that `steered` cuts short is about to begin; false when a steer heard since the last load waits:
   * then the call is not made, and the loop's next boundary delivers the steer before the model says anything.
   */
  async begin(steered: AbortController): Promise<boolean> {
    this.current = steered;
    if (!this.noticed) return true;
    this.noticed = false;
    return !(await this.store.steerWaiting(this.sessionId).catch(() => false));
  }

  /** The model call is over: a notice from now on waits for the next one. */
  end(): void {
    this.current = undefined;
  }

  close(): void {
    this.unwatch();
  }
}

import type { ControlMode } from './gateway-client.ts';

/**
 * Where a run parks between turns: while it is paused, or while a human has taken over (`human_override`) until
 * the mode goes back to `agent_only` or `shared_control`.
 */
export class RunGate {
  private paused = false;
  private controlMode: ControlMode;
  private waiters: (() => void)[] = [];

  constructor(mode: ControlMode) {
    this.controlMode = mode;
  }

  get mode(): ControlMode {
    return this.controlMode;
  }

  get closed(): boolean {
    return this.paused || this.controlMode === 'human_override';
  }

  pause(): void {
    this.paused = true;
  }

  resume(): void {
    this.paused = false;
    this.release();
  }

  setMode(mode: ControlMode): void {
    this.controlMode = mode;
    this.release();
  }

  /** Resolves once the gate is open, or at once when `signal` aborts (the caller checks the signal). */
  pass(signal: AbortSignal): Promise<void> {
    if (!this.closed || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        signal.removeEventListener('abort', done);
        this.waiters = this.waiters.filter((w) => w !== done);
        resolve();
      };
      signal.addEventListener('abort', done, { once: true });
      this.waiters.push(done);
    });
  }

  private release(): void {
    if (this.closed) return;
    for (const waiter of [...this.waiters]) waiter();
  }
}

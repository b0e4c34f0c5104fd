/**
 * A deadline that counts only active time: it stops while the run is parked (paused, or under human override)
 * and goes on when the run does, so a long pause does not time the run out the moment it resumes.
 */
export class ActiveTimeBudget {
  readonly signal: AbortSignal;
  private readonly controller = new AbortController();
  private remainingMs: number;
  private startedAt = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(budgetMs: number) {
    this.remainingMs = budgetMs;
    this.signal = this.controller.signal;
    this.resume();
  }

  pause(): void {
    if (!this.timer) return;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.remainingMs -= performance.now() - this.startedAt;
  }

  resume(): void {
    if (this.timer || this.signal.aborted) return;
    this.startedAt = performance.now();
    // setTimeout caps at 2^31-1 ms (~24.8 days); a longer budget simply re-arms.
    const wait = Math.max(0, Math.min(this.remainingMs, 2 ** 31 - 1));
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.remainingMs -= performance.now() - this.startedAt;
      if (this.remainingMs <= 0) this.controller.abort(new DOMException('active time budget spent', 'TimeoutError'));
      else this.resume();
    }, wait);
    this.timer.unref();
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/** A pass that runs again and again until stopped: what the sweepers of every process are built on. */
export interface RepeatedPass {
  /** Ends the chain; resolves once a pass in progress has settled (none starts after). */
  stop(): Promise<void>;
}

/**
 * Runs `pass` `intervalMs` after the last one settled — the first at once with `now`, else after one interval. A
 * chained timer, so passes never overlap however long one takes, and unref'd, so it never keeps a process alive.
 * `pass` reports its own failures: a rejection, or a throw before its promise, is dropped here and the chain goes on.
 */
export function repeatPass(pass: () => Promise<unknown>, opts: { intervalMs: number; now?: boolean }): RepeatedPass {
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();
  let stopped = false;
  const schedule = (): void => {
    if (!stopped) timer = setTimeout(run, opts.intervalMs).unref();
  };
  const run = (): void => {
    // Started at once, inside an executor: a pass that throws before returning its promise rejects it, rather than
    // throwing out of the timer (an uncaught exception) or out of repeatPass itself.
    running = new Promise<unknown>((resolve) => resolve(pass())).then(() => undefined, () => undefined);
    void running.then(schedule);
  };
  if (opts.now) run();
  else schedule();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      return running;
    },
  };
}

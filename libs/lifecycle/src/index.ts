// How every Cadre process stops: once, on the first of SIGTERM, SIGINT or SIGHUP, or when the process that
// started it goes away (`npm start` sets that up for its children, so a stack killed with -9 leaves nothing behind),
// the one bounded wait for a promise that may never settle (a close, a probe, a command to a Redis that is down),
// the chained timer the sweepers repeat their passes on, and whether a process (one left by a killed stack) runs.

export { awaitWithin } from './await-within.ts';
export { isProcessRunning } from './process-running.ts';
export { repeatPass, type RepeatedPass } from './repeat-pass.ts';

export interface ShutdownOptions {
  /** Drains and closes; the process exits 0 when it resolves, 1 if it throws. */
  close(reason: string): Promise<void>;
  /** Also stop when re-parented (our parent died). */
  exitWithParent?: boolean;
  log?(reason: string): void;
}

export function onShutdown(opts: ShutdownOptions): void {
  let closing = false;
  const stop = (reason: string): void => {
    if (closing) return;
    closing = true;
    opts.log?.(reason);
    opts.close(reason).then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, () => stop(signal));
  if (opts.exitWithParent) whenParentExits((parent) => stop(`parent ${parent} exited`));
}

/**
 * Calls `onExit` once, when the process that started this one has gone away (we were re-parented); checked
 * every half second. Returns a function that stops watching.
 */
export function whenParentExits(onExit: (parentPid: number) => void): () => void {
  const parent = process.ppid;
  let timer: NodeJS.Timeout | undefined;
  // A chained timer, unref'd: it never keeps the process alive by itself.
  const check = (): void => {
    if (process.ppid !== parent) return onExit(parent);
    timer = setTimeout(check, 500).unref();
  };
  timer = setTimeout(check, 500).unref();
  return () => clearTimeout(timer);
}

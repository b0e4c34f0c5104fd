/** True for the error an aborted fetch, timers/promises or AbortSignal.throwIfAborted() rejects with. */
export function isAbortError(err: unknown): boolean {
  return err instanceof Error && err.name === 'AbortError';
}

/** An AbortError carrying the signal's reason, as node's own abortable APIs throw. */
export function abortError(signal: AbortSignal): Error {
  const err = new Error('The operation was aborted', { cause: signal.reason });
  err.name = 'AbortError';
  return err;
}

/**
 * Settles with `work`, or rejects with an AbortError as soon as `signal` aborts, even when `work` ignores the signal
 * (the openai client sleeps between retries without watching it). A late rejection of `work` is swallowed.
 */
export function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    work.catch(() => {});
    return Promise.reject(abortError(signal));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => {
      work.catch(() => {});
      reject(abortError(signal));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err);
      },
    );
  });
}

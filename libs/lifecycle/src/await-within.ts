/**
 * Waits for `pending` at most `ms`, and no longer than `signal` stays unaborted: `{ value }` if it resolves in that
 * time, its rejection if it rejects in that time, else undefined. What a wait that ran out means (an error, "not
 * ready", "not closed") is the caller's to say. `pending` goes on regardless; a rejection after the wait ran out is
 * caught here, never left unhandled. The timer is cleared as soon as either side wins.
 */
export function awaitWithin<T>(pending: Promise<T>, ms: number, signal?: AbortSignal): Promise<{ value: T } | undefined> {
  return new Promise<{ value: T } | undefined>((resolve, reject) => {
    const ranOut = (): void => {
      settle();
      resolve(undefined);
    };
    const timer = setTimeout(ranOut, ms);
    const settle = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', ranOut);
    };
    if (signal?.aborted) ranOut();
    else signal?.addEventListener('abort', ranOut, { once: true });
    pending.then(
      (value) => {
        settle();
        resolve({ value });
      },
      (err: unknown) => {
        settle();
        reject(err);
      },
    );
  });
}

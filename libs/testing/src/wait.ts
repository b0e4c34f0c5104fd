/**
 * Polls `probe` until it returns something other than false/null/undefined, and returns that; fails after
 * `timeoutMs` naming `what`. For waits on a state a test cannot be told about (a lease that expires, a loop
 * that has returned): the wait ends as soon as the state holds, and its length is never asserted.
 */
export async function waitUntil<T>(what: string, probe: () => Promise<T | false | null | undefined> | T | false | null | undefined, opts: { timeoutMs?: number; everyMs?: number } = {}): Promise<T> {
  const { timeoutMs = 20_000, everyMs = 20 } = opts;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== false && value !== null && value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/**
 * Resolves once `count()` reaches `total`, or has not moved for `stillMs`: a stall is progress that stops, so it
 * can only be seen as a while without any (e.g. a client's writes that flow control holds back).
 */
export async function untilStill(count: () => number, total: number, stillMs = 1_000): Promise<void> {
  let last = -1;
  let since = Date.now();
  while (count() < total && Date.now() - since < stillMs) {
    if (count() !== last) {
      last = count();
      since = Date.now();
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

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

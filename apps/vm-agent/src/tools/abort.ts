/** An AbortError carrying the signal's reason, as node's own abortable APIs throw (runAgent tells it from a tool error). */
export function abortError(signal: AbortSignal): Error {
  const err = new Error('The operation was aborted', { cause: signal.reason });
  err.name = 'AbortError';
  return err;
}

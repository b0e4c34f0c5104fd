import type { EventEmitter } from 'node:events';
import type { LogWatcher, LoggedEvent } from '@cadre/store';

/** The event that says a stream is gone: gRPC's 'cancelled', a Node stream's, HTTP's or a /ws socket's 'close'. */
export type GoneEvent = 'cancelled' | 'close';

export interface WritableOptions {
  /** A watcher whose failure ends the wait: it was closed early (it fell too far behind while the stream was full). */
  watcher?: Pick<LogWatcher<LoggedEvent>, 'onFailure'>;
  /** Ends the wait when aborted (the caller's stream ended in a way `gone` does not report). */
  signal?: AbortSignal;
}

/**
 * One wait per stream and gone event, shared by everything blocked on that stream: a /ws socket's conversations and
 * requests, say, add two listeners to it between them, not two each (past ten, Node warns of a listener leak).
 */
const waits = new WeakMap<EventEmitter, Map<GoneEvent, Promise<void>>>();

/**
 * After a write returned false (or found the stream full): waits until the client has taken what was written
 * (`drain`), the connection is gone (`gone`), the watcher failed or the signal aborted. The caller's loop then writes
 * on, or ends the stream. Never waits on a client that stopped reading with more than a bounded buffer held.
 */
export function writable(stream: EventEmitter, gone: GoneEvent, { watcher, signal }: WritableOptions = {}): Promise<void> {
  if (signal?.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    let stopWatching = (): void => undefined;
    let finished = false;
    const done = (): void => {
      if (finished) return;
      finished = true;
      stopWatching();
      signal?.removeEventListener('abort', done);
      resolve();
    };
    void drainedOrGone(stream, gone).then(done);
    signal?.addEventListener('abort', done, { once: true });
    if (watcher) stopWatching = watcher.onFailure(done);
  });
}

function drainedOrGone(stream: EventEmitter, gone: GoneEvent): Promise<void> {
  let byGone = waits.get(stream);
  if (!byGone) waits.set(stream, (byGone = new Map()));
  let wait = byGone.get(gone);
  if (!wait) {
    wait = new Promise<void>((resolve) => {
      const done = (): void => {
        stream.off('drain', done);
        stream.off(gone, done);
        byGone.delete(gone);
        resolve();
      };
      stream.on('drain', done);
      stream.on(gone, done);
    });
    byGone.set(gone, wait);
  }
  return wait;
}

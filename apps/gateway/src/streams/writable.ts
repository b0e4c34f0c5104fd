import type { EventEmitter } from 'node:events';
import type { LogWatcher, LoggedEvent } from '@cadre/store';

/**
 * After a write returned false: waits until the client has taken what was written (`drain`), the connection is
 * gone (`gone`: gRPC's 'cancelled', HTTP's 'close'), or the watcher was closed early (it fell too far behind while
 * we waited). The caller's loop then writes on, or ends the stream. Never waits on a client that stopped reading
 * with more than a bounded buffer held.
 */
export function writable(stream: EventEmitter, gone: 'cancelled' | 'close', watcher: LogWatcher<LoggedEvent>): Promise<void> {
  return new Promise((resolve) => {
    let stopWatching = (): void => undefined;
    const done = (): void => {
      stream.off('drain', done);
      stream.off(gone, done);
      stopWatching();
      resolve();
    };
    stream.on('drain', done);
    stream.on(gone, done);
    stopWatching = watcher.onFailure(done);
  });
}

/**
 * Follows a Cadre SSE stream (a task's or a session's) with fetch, because EventSource cannot send the
 * Authorization header and the key must never go into a URL. Resumes from the last seq it handed out
 * (Last-Event-ID) after a dropped connection, a server `error` event or a gateway restart; stops after the terminal
 * event or when the server answers 204 (nothing more will come). Plain web APIs only: the board runs it in the
 * browser and the `cadre` CLI in Node (through @cadre/board; types in event-stream.d.ts).
 *
 * `onState(kind, text)` reports `live`, `retrying` (with why and from which seq), `ended` or `stopped` (a client
 * error that retrying will not heal: bad key, unknown task, a cursor outside the log).
 * `done` resolves when following stops: `{ended: true}` after the terminal event or a 204, `{ended: false}` after
 * close(), `{ended: false, error}` when stopped by a client error (its `status` is the HTTP status).
 *
 * @param {{ url: string, headers: () => Record<string,string>, afterSeq: number, onEvent: (e: object) => void,
 *   onState?: (kind: string, text: string) => void, isTerminal: (type: string) => boolean }} opts
 * @returns {{ close(): void, done: Promise<{ ended: boolean, error?: Error }> }}
 */
export function followStream(opts) {
  let lastSeq = opts.afterSeq;
  let closed = false;
  let controller = null;
  let retryMs = 500;

  const state = (kind, text) => opts.onState?.(kind, text);

  const deliver = (frame) => {
    if (frame.event === 'error') {
      state('retrying', `stream interrupted (${safeMessage(frame.data)}); resuming after seq ${lastSeq}`);
      return 'reconnect';
    }
    if (!frame.data) return 'more';
    const event = JSON.parse(frame.data);
    // The server never repeats a seq after Last-Event-ID; this guard keeps the log exact even if one did.
    if (typeof event.seq !== 'number' || event.seq <= lastSeq) return 'more';
    lastSeq = event.seq;
    opts.onEvent(event);
    return opts.isTerminal(event.event_type) ? 'done' : 'more';
  };

  const connectOnce = async () => {
    controller = new AbortController();
    const res = await fetch(opts.url, {
      headers: { ...opts.headers(), accept: 'text/event-stream', 'last-event-id': String(lastSeq) },
      signal: controller.signal,
      cache: 'no-store',
    });
    if (res.status === 204) return 'done';
    if (!res.ok) {
      const body = await res.json().catch(() => null);
      const err = new Error(body?.error?.message ?? `HTTP ${res.status}`);
      err.status = res.status;
      throw err;
    }
    state('live', 'live');
    retryMs = 500;
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return 'closed';
      buffer += value.replace(/\r\n?/g, '\n');
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const frame = parseFrame(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
        const next = deliver(frame);
        if (next !== 'more') {
          controller.abort();
          return next;
        }
      }
    }
  };

  const done = (async () => {
    while (!closed) {
      try {
        const outcome = await connectOnce();
        if (outcome === 'done') {
          state('ended', 'ended');
          return { ended: true };
        }
        if (outcome === 'closed' && !closed) state('retrying', `connection closed; resuming after seq ${lastSeq}`);
      } catch (err) {
        if (closed) break;
        // Client errors will not heal by retrying (bad key, unknown task, a cursor outside the log).
        if (err.status && err.status < 500 && err.status !== 429) {
          state('stopped', `stopped: ${err.message}`);
          return { ended: false, error: err };
        }
        state('retrying', `reconnecting after seq ${lastSeq} (${err.message})`);
      }
      if (closed) break;
      await new Promise((r) => setTimeout(r, retryMs));
      retryMs = Math.min(retryMs * 2, 5000);
    }
    return { ended: false };
  })();

  return {
    done,
    close() {
      closed = true;
      controller?.abort();
    },
  };
}

function parseFrame(text) {
  const frame = { event: 'message', data: '', id: null };
  for (const line of text.split('\n')) {
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'data') frame.data += (frame.data ? '\n' : '') + value;
    else if (field === 'event') frame.event = value;
    else if (field === 'id') frame.id = value;
  }
  return frame;
}

function safeMessage(data) {
  try {
    return JSON.parse(data).message ?? 'error';
  } catch {
    return 'error';
  }
}

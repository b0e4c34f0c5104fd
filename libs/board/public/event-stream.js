/**
 * Follows a task's SSE stream with fetch, because EventSource cannot send the Authorization header and the key
 * must never go into a URL. Resumes from the last seq it handed out (Last-Event-ID) after a dropped connection,
 * a server `error` event or a gateway restart; stops after the terminal event or when the server answers 204
 * (nothing more will come).
 *
 * @param {{ url: string, headers: () => Record<string,string>, afterSeq: number,
 *   onEvent: (e: object) => void, onState: (s: string) => void, isTerminal: (type: string) => boolean }} opts
 * @returns {{ close(): void }}
 */
export function followStream(opts) {
  let lastSeq = opts.afterSeq;
  let closed = false;
  let controller = null;
  let retryMs = 500;

  const deliver = (frame) => {
    if (frame.event === 'error') {
      opts.onState(`stream interrupted (${safeMessage(frame.data)}); resuming from seq ${lastSeq}`);
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
    opts.onState('live');
    retryMs = 500;
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return 'reconnect';
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

  (async () => {
    while (!closed) {
      try {
        const outcome = await connectOnce();
        if (outcome === 'done') {
          opts.onState('ended');
          return;
        }
      } catch (err) {
        if (closed) return;
        // Client errors will not heal by retrying (bad key, unknown task, a cursor outside the log).
        if (err.status && err.status < 500 && err.status !== 429) {
          opts.onState(`stopped: ${err.message}`);
          return;
        }
        opts.onState(`reconnecting (${err.message})`);
      }
      if (closed) return;
      await new Promise((r) => setTimeout(r, retryMs));
      retryMs = Math.min(retryMs * 2, 5000);
    }
  })();

  return {
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

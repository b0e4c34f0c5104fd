import type { Json } from '../client.ts';

export interface StreamOptions {
  url: string;
  headers: Record<string, string>;
  afterSeq: number;
  signal: AbortSignal;
  onEvent(event: Json): void;
  onReconnect?(reason: string, lastSeq: number): void;
  isTerminal(type: string): boolean;
}

/**
 * Follows an SSE stream to its terminal event, resuming with Last-Event-ID after a dropped connection or a
 * server `error` event (slow reader, gateway shutdown). Client errors (4xx) end it with that error.
 */
export async function followStream(opts: StreamOptions): Promise<void> {
  let lastSeq = opts.afterSeq;
  let retryMs = 250;
  for (;;) {
    let res: Response;
    try {
      res = await fetch(opts.url, { headers: { ...opts.headers, accept: 'text/event-stream', 'last-event-id': String(lastSeq) }, signal: opts.signal });
    } catch (err) {
      if (opts.signal.aborted) return;
      opts.onReconnect?.((err as Error).message, lastSeq);
      await sleep(retryMs);
      retryMs = Math.min(retryMs * 2, 5000);
      continue;
    }
    if (res.status === 204) return;
    if (!res.ok) {
      const body = (await res.json().catch(() => null)) as Json;
      const err = new Error(body?.error?.message ?? `HTTP ${res.status}`) as Error & { status: number };
      err.status = res.status;
      if (res.status < 500) throw err;
      opts.onReconnect?.(err.message, lastSeq);
      await sleep(retryMs);
      continue;
    }
    retryMs = 250;
    let buffer = '';
    const decoder = new TextDecoder();
    try {
      for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
        buffer += decoder.decode(chunk, { stream: true }).replace(/\r\n?/g, '\n');
        let cut: number;
        while ((cut = buffer.indexOf('\n\n')) >= 0) {
          const frame = parseFrame(buffer.slice(0, cut));
          buffer = buffer.slice(cut + 2);
          if (frame.event === 'error') throw new Error(`stream interrupted: ${frame.data}`);
          if (!frame.data) continue;
          const event = JSON.parse(frame.data) as Json;
          if (typeof event.seq !== 'number' || event.seq <= lastSeq) continue;
          lastSeq = event.seq;
          opts.onEvent(event);
          if (opts.isTerminal(event.event_type)) return;
        }
      }
      opts.onReconnect?.('connection closed', lastSeq);
    } catch (err) {
      if (opts.signal.aborted) return;
      opts.onReconnect?.((err as Error).message, lastSeq);
    }
    await sleep(retryMs);
  }
}

function parseFrame(text: string): { event: string; data: string } {
  const frame = { event: 'message', data: '' };
  for (const line of text.split('\n')) {
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'data') frame.data += (frame.data ? '\n' : '') + value;
    else if (field === 'event') frame.event = value;
  }
  return frame;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

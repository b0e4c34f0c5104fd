import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from '@cadre/observability';
import type { LoggedEvent, LogWatcher } from '@cadre/store';
import { ApiError, toApiError } from '../errors.ts';
import { writable } from '../streams/writable.ts';

/**
 * Server-sent events for one watcher: `id:` is the seq, `event:` the event type, `data:` the event JSON (the same
 * shape as HTTP polling). The response ends after the terminal event. An early end (slow reader, shutdown)
 * sends an `error` event first; the browser's EventSource reconnects with Last-Event-ID and resumes. A log that
 * vanished (`not_found`) ends the same way, and the reconnect's 404 stops the EventSource.
 */
// The fan-out hands every watcher the same event object: format each SSE frame once.
const frames = new WeakMap<object, string>();
function frameOf(event: { seq: number; event_type: string }): string {
  let frame = frames.get(event);
  if (frame === undefined) {
    frame = `id: ${event.seq}\nevent: ${event.event_type}\ndata: ${JSON.stringify(event)}\n\n`;
    frames.set(event, frame);
  }
  return frame;
}

/**
 * Where an SSE reader resumes: the `Last-Event-ID` its EventSource sends on reconnect (a seq), which wins over
 * `?after_seq=`.
 */
export function resumeCursor(request: FastifyRequest, afterSeq: number | undefined): number {
  const header = request.headers['last-event-id'];
  const raw = Array.isArray(header) ? header[0] : header;
  if (raw === undefined || raw === '') return afterSeq ?? 0;
  if (!/^\d{1,15}$/.test(raw)) throw new ApiError('invalid_argument', `Last-Event-ID must be a seq (a non-negative integer), got "${raw.slice(0, 32)}"`);
  return Number(raw);
}

export class SseSessions {
  /** Open streams and what each follows (a task, a session, a run, the approvals inbox), for the metrics. */
  private readonly open = new Map<FastifyReply, string>();
  private readonly keepAliveMs: number;
  private readonly logger: Logger;

  constructor(opts: { logger: Logger; keepAliveMs?: number }) {
    this.logger = opts.logger;
    this.keepAliveMs = opts.keepAliveMs ?? 15_000;
  }

  /** Open streams, or those that follow one kind of log. */
  count(kind?: string): number {
    if (kind === undefined) return this.open.size;
    let n = 0;
    for (const k of this.open.values()) if (k === kind) n++;
    return n;
  }

  serve<E extends LoggedEvent & { event_type: string }>(request: FastifyRequest, reply: FastifyReply, watcher: LogWatcher<E> | null, kind = 'other'): void {
    // The reader already has everything (it resumed after the last event): 204 is what tells EventSource to stop
    // reconnecting; a 200 that ends at once would make it come back every second for ever.
    if (!watcher) return void reply.status(204).send();
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    res.write('retry: 1000\n\n');
    this.open.set(reply, kind);
    const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), this.keepAliveMs);
    const stop = (): void => void watcher.return();
    request.raw.once('close', stop);
    // A client gone while its watch was opening closed the request before the listener: nothing would ever end the
    // watch. Checked on the object listened to.
    if (request.raw.destroyed) stop();

    void (async () => {
      try {
        // A closed connection takes nothing more (its 'close' already ended the watcher, which ends the pipe).
        await watcher.pipeTo((event) => res.destroyed || res.write(frameOf(event)), () => writable(res, 'close', { watcher }));
      } catch (err) {
        const api = toApiError(err);
        if (!api) this.logger.error({ err }, 'sse stream failed');
        if (!res.destroyed) {
          res.write(`event: error\ndata: ${JSON.stringify({ code: api?.code ?? 'internal', message: api?.message ?? 'internal error', last_seq: watcher.lastSeq })}\n\n`);
        }
      } finally {
        void watcher.return();
        clearInterval(keepAlive);
        request.raw.off('close', stop);
        this.open.delete(reply);
        res.end();
      }
    })();
  }
}

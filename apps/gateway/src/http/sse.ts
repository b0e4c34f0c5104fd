import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from '@cadre/observability';
import type { LoggedEvent, LogWatcher } from '@cadre/store';
import { toApiError } from '../errors.ts';
import { writable } from '../streams/writable.ts';

/**
 * Server-sent events for one watcher: `id:` is the seq, `event:` the event type, `data:` the event JSON (the same
 * shape as HTTP polling). The response ends after the terminal event. An early end (slow reader, shutdown)
 * sends an `error` event first; the browser's EventSource reconnects with Last-Event-ID and resumes.
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

export class SseSessions {
  private readonly open = new Set<FastifyReply>();
  private readonly keepAliveMs: number;
  private readonly logger: Logger;

  constructor(opts: { logger: Logger; keepAliveMs?: number }) {
    this.logger = opts.logger;
    this.keepAliveMs = opts.keepAliveMs ?? 15_000;
  }

  count(): number {
    return this.open.size;
  }

  serve<E extends LoggedEvent & { event_type: string }>(request: FastifyRequest, reply: FastifyReply, watcher: LogWatcher<E> | null): void {
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    res.write('retry: 1000\n\n');
    if (!watcher) {
      res.end();
      return;
    }
    this.open.add(reply);
    const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), this.keepAliveMs);
    const stop = (): void => void watcher.return();
    request.raw.once('close', stop);

    void (async () => {
      try {
        for await (const event of watcher) {
          if (res.destroyed) break;
          const ok = res.write(frameOf(event));
          if (!ok) await writable(res, 'close', watcher);
        }
      } catch (err) {
        const api = toApiError(err);
        if (!api) this.logger.error({ err }, 'sse stream failed');
        if (!res.destroyed) {
          res.write(`event: error\ndata: ${JSON.stringify({ code: api?.code ?? 'internal', message: api?.message ?? 'internal error', last_seq: watcher.lastSeq })}\n\n`);
        }
      } finally {
        clearInterval(keepAlive);
        request.raw.off('close', stop);
        this.open.delete(reply);
        res.end();
      }
    })();
  }
}

import * as grpc from '@grpc/grpc-js';
import type { Logger } from '@cadre/observability';
import type { SessionEvent } from '@cadre/protocol';
import type { LogWatcher } from '@cadre/store';
import type { Principal } from '../auth.ts';
import { ApiError, GATEWAY_SHUTTING_DOWN, grpcStatusOf, toApiError } from '../errors.ts';
import { writable } from '../streams/writable.ts';

/**
 * Requests a call may have waiting to be handled (one at a time) before the gateway stops reading it. Its read
 * buffer (grpc-js's object-mode stream) holds 16 more, so a call holds at most 32 requests, as a /ws socket, each
 * within grpc-js's 4 MB message limit. Past that HTTP/2 flow control holds the client's writes back: nothing is
 * dropped or refused, so no cap ends the call (nor a /ws socket, which TCP holds back likewise).
 */
const MAX_WAITING_REQUESTS = 16;

/** What every session edge's call needs from the gateway. */
export interface BidiCallDeps {
  logger: Logger;
  onOpen(): void;
  onClose(): void;
  /** Aborted when the gateway drains: the call ends UNAVAILABLE, whether or not it has started. */
  draining: AbortSignal;
}

/**
 * One bidi call of a session edge (roz StreamSession, kontekst Run): its requests handled one at a time in arrival
 * order, the session's log through one watcher, the gateway's drain, and one way to end — with a status (`fail`)
 * or OK (`finish`) — after which nothing more is written and the watcher is let go. The session outlives the call.
 */
export abstract class BidiSessionCall<Req, Res, Deps extends BidiCallDeps = BidiCallDeps> {
  protected principal: Principal | undefined;
  protected sessionId: string | undefined;
  protected watcher: LogWatcher<SessionEvent> | null = null;
  protected done = false;
  /** The requests so far: each is handled once the one before it has been. */
  protected chain: Promise<void> = Promise.resolve();
  /** Requests in `chain` not handled yet. */
  private waiting = 0;
  /** Aborted when the call ends: a request waiting for room stops waiting. */
  private readonly ended = new AbortController();
  protected readonly call: grpc.ServerDuplexStream<Req, Res>;
  /** The edge's dependencies, the shared ones (BidiCallDeps) and the subclass's own. */
  protected readonly deps: Deps;
  /** The call's name in the log (e.g. "StreamSession"). */
  private readonly name: string;

  protected constructor(deps: Deps, call: grpc.ServerDuplexStream<Req, Res>, name: string) {
    this.deps = deps;
    this.call = call;
    this.name = name;
  }

  protected abstract handle(request: Req): Promise<void>;

  /**
   * Counts the call, ends it on a drain (one already under way included), handles its requests in order, and stops
   * it on the call's 'error' (grpc-js's own, e.g. a request it cannot decode, or the status `fail` sends).
   * A client that sends faster than its requests are handled, or that does not read their answers, is not read
   * further once MAX_WAITING_REQUESTS wait: the call is paused until they are handled.
   */
  protected listen(): void {
    this.deps.onOpen();
    this.deps.draining.addEventListener('abort', this.drain, { once: true });
    // A call that reached a connection the gateway drains already (a stream opened before its GOAWAY arrived).
    if (this.deps.draining.aborted) this.drain();
    this.call.on('data', (request: Req) => {
      if (++this.waiting >= MAX_WAITING_REQUESTS) this.call.pause();
      // A client that does not read its answers is not answered further until it does (grpc-js would buffer them
      // without limit): its requests wait, and once MAX_WAITING_REQUESTS do, its writes.
      this.chain = this.chain.then(() => this.room()).then(() => this.handle(request)).catch((err: unknown) => this.fail(err)).finally(() => {
        if (--this.waiting < MAX_WAITING_REQUESTS && this.call.isPaused()) this.call.resume();
      });
    });
    this.call.on('error', () => this.stop());
  }

  /**
   * Keeps the watcher a start opened, unless the call ended while it was opening (a drain ends a call at once):
   * then the watcher goes now and the start must stop (false), so nothing begins for a client already told to go.
   */
  protected adopt(watcher: LogWatcher<SessionEvent> | null): boolean {
    if (this.done) {
      void watcher?.return();
      return false;
    }
    this.watcher = watcher;
    return true;
  }

  /** Ends the call with the error's status; an unexpected error is logged and ends it INTERNAL. */
  protected fail(err: unknown): void {
    if (this.done) return;
    const api = toApiError(err);
    if (!api) this.deps.logger.error({ err, sessionId: this.sessionId }, `${this.name} failed`);
    const status = { code: api ? grpcStatusOf(api.code) : grpc.status.INTERNAL, details: api?.message ?? 'internal error' };
    this.stop();
    if (!this.call.cancelled) this.call.emit('error', status);
  }

  /** Ends the call with OK. */
  protected finish(): void {
    if (this.done) return;
    this.stop();
    if (!this.call.cancelled) this.call.end();
  }

  /** Resolves once the call's writes hold less than its high-water mark (its 'drain'), or the call has ended. */
  private room(): Promise<void> {
    if (this.done || this.call.cancelled || !this.call.writableNeedDrain) return Promise.resolve();
    return writable(this.call, 'close', { signal: this.ended.signal });
  }

  /** The gateway drains: the call ends with a status its client retries on another gateway (from its last seq). */
  private readonly drain = (): void => this.fail(new ApiError('unavailable', GATEWAY_SHUTTING_DOWN));

  /** Nothing more is written: lets go of the drain, the subclass's timers and the watcher, and uncounts the call. */
  protected stop(): void {
    if (this.done) return;
    this.done = true;
    this.ended.abort();
    this.deps.draining.removeEventListener('abort', this.drain);
    this.stopped();
    void this.watcher?.return();
    this.deps.onClose();
  }

  /** What a subclass lets go of when the call ends (e.g. a timer). */
  protected stopped(): void {}
}

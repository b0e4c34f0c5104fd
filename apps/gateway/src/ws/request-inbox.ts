export interface RequestInboxOptions {
  /** Requests that may be queued for handling at once (the one being handled among them). */
  maxQueued: number;
  /** Their characters. */
  maxChars: number;
  /** Handles one request; the next starts once it has settled. */
  handle(raw: string | null): Promise<void>;
  /** Hears a request whose handling rejected: the requests behind it are still handled. */
  onError(err: unknown): void;
  /** Stop reading the socket (TCP then holds the client's writes back) / read it again: each called once per pause. */
  pause(): void;
  resume(): void;
}

/**
 * A socket's requests, handled one at a time in arrival order, with at most `maxQueued` of them (and `maxChars`
 * characters) queued for handling: past either the socket is paused, and read again once they are handled.
 * ws parses a TCP read whole — its pause() stops the next read, not the frames of the current one — so one read of
 * small frames (64 KiB: up to ~10,000 of them) would all be queued at once, each with its handling's promises and
 * closures. The frames that come past the cap are kept apart as their text alone, and are queued, in order, as
 * room frees; the socket is read again only once none of them is left.
 */
export class RequestInbox {
  private readonly opts: RequestInboxOptions;
  private chain: Promise<void> = Promise.resolve();
  private queuedCount = 0;
  private queuedChars = 0;
  private paused = false;
  /** Frames parsed past the cap, in arrival order: at most the rest of the read that reached it. */
  private readonly beyond: (string | null)[] = [];

  constructor(opts: RequestInboxOptions) {
    this.opts = opts;
  }

  /** Requests queued for handling (never more than maxQueued) and frames kept apart past the cap. */
  get size(): { queued: number; beyond: number } {
    return { queued: this.queuedCount, beyond: this.beyond.length };
  }

  offer(raw: string | null): void {
    if (this.beyond.length > 0 || this.full()) {
      this.beyond.push(raw);
      return;
    }
    this.enqueue(raw);
    if (this.full() && !this.paused) {
      this.paused = true;
      this.opts.pause();
    }
  }

  private full(): boolean {
    return this.queuedCount >= this.opts.maxQueued || this.queuedChars >= this.opts.maxChars;
  }

  private enqueue(raw: string | null): void {
    const chars = raw?.length ?? 0;
    this.queuedCount++;
    this.queuedChars += chars;
    // Caught per request: a rejection left on the chain would skip every later handle and go unhandled.
    this.chain = this.chain.then(() => this.opts.handle(raw)).catch((err: unknown) => this.opts.onError(err)).finally(() => {
      this.queuedCount--;
      this.queuedChars -= chars;
      while (this.beyond.length > 0 && !this.full()) this.enqueue(this.beyond.shift()!);
      if (this.paused && this.beyond.length === 0 && !this.full()) {
        this.paused = false;
        this.opts.resume();
      }
    });
  }
}

import type { SessionEventInput } from '@cadre/protocol';

/**
 * Coalesces a model stream's text and thinking deltas into few log events: consecutive pieces of one kind join
 * into one event, written when the flush timer fires (`flushMs` after the first unwritten piece), when the
 * caller drains it (a tool call or the turn's end), never once per token. The stream's very first piece is
 * written at once: a client waits for the first delta, and one write more per model call is cheap. One flush is in flight at a time,
 * so events reach the log in stream order.
 */
export class DeltaBuffer {
  private pending: SessionEventInput[] = [];
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> = Promise.resolve();
  private failed: unknown;
  private started = false;
  private readonly messageId: string;
  private readonly flushMs: number;
  private readonly write: (events: SessionEventInput[]) => Promise<unknown>;
  private readonly onError: (err: unknown) => void;

  constructor(opts: { messageId: string; flushMs: number; write: (events: SessionEventInput[]) => Promise<unknown>; onError: (err: unknown) => void }) {
    this.messageId = opts.messageId;
    this.flushMs = opts.flushMs;
    this.write = opts.write;
    this.onError = opts.onError;
  }

  add(kind: 'text' | 'thinking', content: string): void {
    const type = kind === 'text' ? 'text_delta' : 'thinking_delta';
    const last = this.pending.at(-1);
    if (last && last.event_type === type) last.payload.content += content;
    else this.pending.push({ event_type: type, payload: { message_id: this.messageId, content } });
    if (!this.started) {
      this.started = true;
      this.flush();
      return;
    }
    this.timer ??= setTimeout(() => this.flush(), this.flushMs);
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    this.inFlight = this.inFlight.then(async () => {
      if (this.failed) return;
      try {
        await this.write(batch);
      } catch (err) {
        // A fenced write (cancelled turn, lost lease) stops the stream: the caller aborts it.
        this.failed = err;
        this.onError(err);
      }
    });
  }

  /** Waits for written batches and hands back what was not written yet, to go with the caller's next commit. */
  async drain(): Promise<SessionEventInput[]> {
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.inFlight;
    if (this.failed) throw this.failed;
    const rest = this.pending;
    this.pending = [];
    return rest;
  }

  /** Stops the timer without writing (the stream was aborted). */
  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.pending = [];
  }
}

import type { SessionEventInput } from '@cadre/protocol';

/**
 * Coalesces a model stream's events into few log writes without a fixed delay (Nagle's rule): a piece is written
 * at once when no write is in flight; while one is, pieces accumulate — consecutive text or thinking pieces join
 * into one event — and everything accumulated goes in one write the moment the previous one completes. So an idle
 * stream pays no wait, and the slower the writes (the busier Redis or the worker), the bigger each batch: never one
 * write per token under load. One write is in flight at a time, so events reach the log in stream order. No cap on
 * a batch: it holds what the model produced during one write, which is small unless Redis stalls — and then the
 * next write carries it all at once, the cheapest way to catch up.
 */
export class DeltaBuffer {
  private pending: SessionEventInput[] = [];
  private writing: Promise<void> | undefined;
  private failed: unknown;
  /** Set by drain() and stop(): nothing more is written by the buffer itself. */
  private closed = false;
  private readonly messageId: string;
  private readonly write: (events: SessionEventInput[]) => Promise<unknown>;
  private readonly onError: (err: unknown) => void;

  constructor(opts: { messageId: string; write: (events: SessionEventInput[]) => Promise<unknown>; onError: (err: unknown) => void }) {
    this.messageId = opts.messageId;
    this.write = opts.write;
    this.onError = opts.onError;
  }

  add(kind: 'text' | 'thinking', content: string): void {
    const type = kind === 'text' ? 'text_delta' : 'thinking_delta';
    const last = this.pending.at(-1);
    if (last && last.event_type === type) last.payload.content += content;
    else this.pending.push({ event_type: type, payload: { message_id: this.messageId, content } });
    this.writeNext();
  }

  /** Any other event of the stream (e.g. an activity update), kept in order with the deltas around it. */
  push(event: SessionEventInput): void {
    this.pending.push(event);
    this.writeNext();
  }

  private writeNext(): void {
    if (this.writing || this.closed || this.failed || this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    this.writing = this.write(batch).then(
      () => {
        this.writing = undefined;
        this.writeNext();
      },
      (err: unknown) => {
        // A fenced write (cancelled turn, lost lease) stops the stream: the caller aborts it.
        this.writing = undefined;
        this.failed = err;
        this.onError(err);
      },
    );
  }

  /** Waits for the write in flight and hands back what was not written yet, to go with the caller's next commit. */
  async drain(): Promise<SessionEventInput[]> {
    this.closed = true;
    await this.writing;
    if (this.failed) throw this.failed;
    const rest = this.pending;
    this.pending = [];
    return rest;
  }

  /** Writes nothing more (the stream was aborted); a write in flight still completes. */
  stop(): void {
    this.closed = true;
    this.pending = [];
  }
}

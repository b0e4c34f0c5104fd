import { TEST_API_KEY } from '@cadre/testing';

export interface SseFrame {
  seq: number;
  event_type: string;
  /** The event as HTTP polling returns it. */
  data: { payload: Record<string, unknown> } & Record<string, unknown>;
}

/**
 * An SSE stream read as a browser's fetch would: the frames with an id (events), and the `error` frame if one
 * closed it. Reads to the stream's end, or until `until` says the frame just read is the last one wanted.
 */
export async function readSse(
  url: string,
  afterSeq: number,
  opts: { onEvent?: (frame: SseFrame) => void; until?: (frame: SseFrame) => boolean } = {},
): Promise<{ frames: SseFrame[]; seqs: number[]; error: { code: string; last_seq: number } | null }> {
  const stop = new AbortController();
  const res = await fetch(`${url}?after_seq=${afterSeq}`, { headers: { authorization: `Bearer ${TEST_API_KEY}` }, signal: stop.signal });
  const frames: SseFrame[] = [];
  let error: { code: string; last_seq: number } | null = null;
  let buffer = '';
  const decoder = new TextDecoder();
  try {
    for await (const chunk of res.body!) {
      buffer += decoder.decode(chunk as Uint8Array, { stream: true });
      let end: number;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const raw = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const id = /^id: (\d+)$/m.exec(raw);
        const data = /^data: (.*)$/m.exec(raw)?.[1];
        if (id) {
          const frame = { seq: Number(id[1]), event_type: /^event: (.*)$/m.exec(raw)![1]!, data: JSON.parse(data!) };
          frames.push(frame);
          opts.onEvent?.(frame);
          if (opts.until?.(frame)) {
            stop.abort();
            return { frames, seqs: frames.map((f) => f.seq), error };
          }
        }
        if (/^event: error$/m.test(raw)) error = JSON.parse(data!);
      }
    }
  } catch (err) {
    if (!stop.signal.aborted) throw err;
  }
  return { frames, seqs: frames.map((f) => f.seq), error };
}

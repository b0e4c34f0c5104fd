// The coalescing rule on its own: a write goes out at once when none is in flight, and what arrives meanwhile goes
// in one write when it completes. The write is a function the test answers by hand, so "in flight" is exact.
import type { SessionEventInput } from '@cadre/protocol';
import { describe, expect, it } from 'vitest';
import { DeltaBuffer } from './delta-buffer.ts';

interface Write {
  events: SessionEventInput[];
  done: () => void;
  fail: (err: Error) => void;
}

function harness() {
  const writes: Write[] = [];
  const errors: unknown[] = [];
  const buffer = new DeltaBuffer({
    messageId: 'm1',
    write: (events) => new Promise<void>((resolve, reject) => writes.push({ events: structuredClone(events), done: resolve, fail: reject })),
    onError: (err) => errors.push(err),
  });
  /** Lets the buffer's completion callbacks run. */
  const settle = () => new Promise<void>((resolve) => setImmediate(resolve));
  return { buffer, writes, errors, settle };
}

const text = (content: string): SessionEventInput => ({ event_type: 'text_delta', payload: { message_id: 'm1', content } });
const thinking = (content: string): SessionEventInput => ({ event_type: 'thinking_delta', payload: { message_id: 'm1', content } });

describe('DeltaBuffer', () => {
  it('writes a piece at once when no write is in flight, with no timer', () => {
    const { buffer, writes } = harness();
    buffer.add('text', 'Hello');
    expect(writes.map((w) => w.events)).toEqual([[text('Hello')]]);
  });

  it('coalesces what arrives while a write is in flight into one write, sent when it completes', async () => {
    const { buffer, writes, settle } = harness();
    buffer.add('thinking', 'hm');
    buffer.add('thinking', 'm, ');
    buffer.add('text', 'The ');
    buffer.add('text', 'answer ');
    buffer.add('text', 'is');
    buffer.push({ event_type: 'activity', payload: { state: 'thinking', detail: '' } });
    buffer.add('text', ' 42');
    await settle();
    expect(writes).toHaveLength(1);
    writes[0]!.done();
    await settle();
    // Consecutive pieces of one kind joined; kinds and the other event kept in stream order.
    expect(writes.map((w) => w.events)).toEqual([
      [thinking('hm')],
      [thinking('m, '), text('The answer is'), { event_type: 'activity', payload: { state: 'thinking', detail: '' } }, text(' 42')],
    ]);
    // Idle again: the next piece goes at once.
    writes[1]!.done();
    await settle();
    buffer.add('text', '.');
    expect(writes.map((w) => w.events).at(-1)).toEqual([text('.')]);
  });

  it('drain waits for the write in flight and hands back the rest without writing it', async () => {
    const { buffer, writes, settle } = harness();
    buffer.add('text', 'a');
    buffer.add('text', 'b');
    let drained: SessionEventInput[] | undefined;
    const draining = buffer.drain().then((rest) => (drained = rest));
    await settle();
    expect(drained).toBeUndefined();
    writes[0]!.done();
    await draining;
    expect(drained).toEqual([text('b')]);
    expect(writes).toHaveLength(1);
  });

  it('a failed write stops the buffer: onError once, nothing more written, drain throws it', async () => {
    const { buffer, writes, errors, settle } = harness();
    buffer.add('text', 'a');
    buffer.add('text', 'b');
    const fenced = new Error('lease_lost');
    writes[0]!.fail(fenced);
    await settle();
    buffer.add('text', 'c');
    await settle();
    expect(errors).toEqual([fenced]);
    expect(writes).toHaveLength(1);
    await expect(buffer.drain()).rejects.toBe(fenced);
  });

  it('stop drops what is pending and writes nothing more', async () => {
    const { buffer, writes, settle } = harness();
    buffer.add('text', 'a');
    buffer.add('text', 'b');
    buffer.stop();
    writes[0]!.done();
    await settle();
    buffer.add('text', 'c');
    expect(writes).toHaveLength(1);
  });
});

import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertContiguous, grpcClient, httpClient } from '@cadre/testing';
import type { AgentServiceClient } from '@cadre/protocol';
import { TestStack } from './support/stack.ts';
import { SessionStream, isCase } from './support/session-client.ts';

let stack: TestStack;
let client: AgentServiceClient;

beforeAll(async () => {
  stack = await TestStack.start({ gateways: 1, workers: 1, env: { CADRE_SESSION_KEEPALIVE_MS: '150' } });
  client = grpcClient(stack.grpcTarget);
});
afterAll(async () => {
  client?.close();
  await stack?.stop();
});

const start = (s: SessionStream, extra: object = {}): void =>
  s.send({ $case: 'start', value: { environmentId: 'demo', tools: [], history: [], projectContext: [], afterSeq: 0, ...extra } });

describe('StreamSession over a real gRPC client', () => {
  it('starts a session, streams deltas in order and ends the turn with usage', async () => {
    const s = new SessionStream(client);
    start(s);
    const started = await s.waitForCase('sessionStarted');
    const sessionId = (started.response!.value as { sessionId: string }).sessionId;
    expect(started.seq).toBe(1);
    s.send({ $case: 'userMessage', value: { content: 'Tell me a story [[scripted:think=Let me think about stories]] [[scripted:words=40]]', context: [], tools: [], messageId: 'm1' } });
    const done = await s.waitForCase('turnComplete');
    const turn = done.response!.value as { messageId: string; stopReason: string; usage: { inputTokens: number; outputTokens: number } };
    expect(turn.messageId).toBe('m1');
    expect(turn.stopReason).toBe('end_turn');
    expect(turn.usage.outputTokens).toBeGreaterThan(0);
    const text = s.of('textDelta');
    const thinking = s.of('thinkingDelta');
    expect(text.every((d) => d.messageId === 'm1')).toBe(true);
    expect(thinking.map((d) => d.content).join('')).toBe('Let me think about stories');
    expect(text.map((d) => d.content).join('')).toMatch(/^Scripted answer to "Tell me a story.*w36 scripted model keeps/s);
    // Thinking comes before the answer; seqs of log frames rise strictly.
    expect(thinking.at(-1)!.seq).toBeLessThan(text[0]!.seq);
    const seqs = s.frames.map((f) => f.seq).filter((n) => n > 0);
    expect([...seqs].sort((a, b) => a - b)).toEqual(seqs);
    expect(new Set(seqs).size).toBe(seqs.length);
    // Coalesced: far fewer text frames than the model's chunks (3 words each).
    expect(text.length).toBeLessThan(20);

    // HTTP polling serves the same log, seq 1.. with no gaps.
    const page = await httpClient(stack.url).get<{ events: { seq: number; event_type: string }[] }>(`/api/sessions/${sessionId}/events?limit=1000`);
    assertContiguous(page.body.events.map((e) => e.seq));
    expect(page.body.events.filter((e) => e.seq <= done.seq).map((e) => e.seq)).toEqual(expect.arrayContaining(seqs));

    s.send({ $case: 'ping', value: {} });
    await s.waitForCase('pong');
    s.send({ $case: 'cancelSession', value: { reason: 'done' } });
    expect((await s.status).code).toBe(grpc.status.OK);
    const closed = await httpClient(stack.url).get<{ session: { status: string } }>(`/api/sessions/${sessionId}`);
    expect(closed.body.session.status).toBe('closed');
  });

  it('runs a builtin tool on the worker and a client tool round trip', async () => {
    const s = new SessionStream(client);
    start(s, { tools: [{ name: 'read_clipboard', description: 'Reads the clipboard', parametersSchema: { type: 'object', properties: {} }, timeoutMs: 0, category: 0 }] });
    await s.waitForCase('sessionStarted');
    s.send({
      $case: 'userMessage',
      value: { content: 'What is 6*7? [[scripted:call=calculate({"expression":"6*7"})]] [[scripted:call=read_clipboard({"format":"text"})]]', context: [], tools: [] },
    });
    const request = await s.waitForCase('toolRequest');
    const req = request.response!.value as { toolCallId: string; toolName: string; parameters: object };
    expect(req.toolName).toBe('read_clipboard');
    expect(req.parameters).toEqual({ format: 'text' });
    // The builtin ran first, on the worker: its progress came as activity.
    expect(s.of('activityUpdate').some((a) => a.state === 'calling_tool' && a.detail === 'calculate')).toBe(true);
    s.send({ $case: 'toolResult', value: { toolCallId: req.toolCallId, success: true, result: 'clipboard: hello', truncated: false } });
    const done = await s.waitForCase('turnComplete');
    const answer = s.of('textDelta').map((d) => d.content).join('');
    expect(answer).toContain('using 2 tool result(s): 42; clipboard: hello');
    expect((done.response!.value as { stopReason: string }).stopReason).toBe('end_turn');
    // A second result for the finished call is refused in band, and the stream stays open.
    s.send({ $case: 'toolResult', value: { toolCallId: req.toolCallId, success: true, result: 'again', truncated: false } });
    const err = await s.waitFor(isCase('error'), 5000, s.frames.indexOf(done));
    expect(err.response!.value).toMatchObject({ code: 'invalid_argument', message: expect.stringContaining('already has its result') });
    s.end();
    expect((await s.status).code).toBe(grpc.status.OK);
  });

  it('keeps streaming after the client half-closes until the turn ends, with keepalives during it', async () => {
    const s = new SessionStream(client);
    start(s, { maxContextTokens: 50_000 });
    s.send({ $case: 'userMessage', value: { content: 'Slowly [[scripted:words=60]] [[scripted:chunk_delay=25]]', messageId: 'm-slow' } });
    s.end();
    expect((await s.status).code).toBe(grpc.status.OK);
    const cases = s.frames.map((f) => f.response?.$case);
    expect(cases[0]).toBe('sessionStarted');
    expect(cases.at(-1)).toBe('turnComplete');
    const keepalives = s.of('keepalive');
    expect(keepalives.length).toBeGreaterThan(0);
    expect(keepalives.every((k) => k.tokensMax === 50_000 && k.seq === 0)).toBe(true);
    expect(s.of('textDelta').map((d) => d.content).join('')).toContain('w48');
  });

  it('compacts the transcript through the model when it outgrows max_context_tokens', async () => {
    const s = new SessionStream(client);
    start(s, { maxContextTokens: 300 });
    await s.waitForCase('sessionStarted');
    const sessionId = (s.frames[0]!.response!.value as { sessionId: string }).sessionId;
    s.send({ $case: 'userMessage', value: { content: 'Tell me everything [[scripted:words=400]]', messageId: 't1' } });
    const first = await s.waitForCase('turnComplete');
    s.send({ $case: 'userMessage', value: { content: 'And briefly? [[scripted:words=0]]', messageId: 't2' } });
    const second = await s.waitFor((f) => f.response?.$case === 'turnComplete' && f.seq > first.seq);
    const compacted = s.of('contextCompacted');
    expect(compacted).toHaveLength(1);
    const c = compacted[0]!;
    expect(c.seq).toBeGreaterThan(first.seq);
    expect(c.seq).toBeLessThan(second.seq);
    expect(c.tokensBefore).toBeGreaterThan(300);
    expect(c.tokensAfter).toBeLessThan(c.tokensBefore);
    expect(c).toMatchObject({ level: 'summary', messagesBefore: 3, messagesAfter: 2, summary: expect.stringContaining('Summarise this conversation') });
    // The turn's answer comes from the compacted transcript: the summary, then the new message.
    const text = s.of('textDelta').filter((d) => d.seq > c.seq).map((d) => d.content).join('');
    expect(text).toBe('Scripted answer to "And briefly? [[scripted:words=0]]"');
    const events = await httpClient(stack.url).get<{ events: { event_type: string; payload: any }[] }>(`/api/sessions/${sessionId}/events?limit=1000`);
    expect(events.body.events.find((e) => e.event_type === 'context_compacted')!.payload.messages_before).toBe(3);
    s.send({ $case: 'cancelSession', value: {} });
    expect((await s.status).code).toBe(grpc.status.OK);
  });

  it('an image counts as an image in the context budget, not as its base64: a session with one does not compact needlessly', async () => {
    const s = new SessionStream(client);
    // 3,000 tokens: room for the image (counted as 1,445, the most OpenAI's tile formula gives) and a few messages;
    // by its base64 (~1.4 M characters) the 1 MB image alone would be ~350,000.
    start(s, { maxContextTokens: 3000 });
    const started = await s.waitForCase('sessionStarted');
    const sessionId = (started.response!.value as { sessionId: string }).sessionId;
    const image = Buffer.alloc(1024 * 1024, 7);
    s.send({ $case: 'userMessage', value: { content: 'Look at this', messageId: 'i1', context: [{ block: { $case: 'binary', value: { mimeType: 'image/png', data: image } } }] } });
    const first = await s.waitForCase('turnComplete');
    s.send({ $case: 'userMessage', value: { content: 'And now?', messageId: 'i2' } });
    await s.waitFor((f) => f.response?.$case === 'turnComplete' && f.seq > first.seq);
    expect(s.of('contextCompacted')).toEqual([]);
    expect(s.of('textDelta').filter((d) => d.seq > first.seq).map((d) => d.content).join('')).toBe('Scripted answer to "And now?"');
    // The model's second call still had the whole conversation, image included.
    const { body } = await httpClient(stack.url).get<{ messages: { role: string; content: unknown }[] }>(`/api/sessions/${sessionId}/messages`);
    expect(body.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant']);
    expect(body.messages[0]!.content).toEqual([{ type: 'text', text: 'Look at this' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${image.toString('base64')}` } }]);
    s.end();
  });

  it('binary context blocks are images the model sees (data URLs through openai); other types and oversized ones are refused', async () => {
    // A 1×1 PNG.
    const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');
    const s = new SessionStream(client);
    start(s);
    const started = await s.waitForCase('sessionStarted');
    const sessionId = (started.response!.value as { sessionId: string }).sessionId;
    const api = httpClient(stack.url);
    const eventCount = async () => (await api.get<{ events: unknown[] }>(`/api/sessions/${sessionId}/events?limit=1000`)).body.events.length;
    const before = await eventCount();

    const refusals = s.of('error').length;
    s.send({ $case: 'userMessage', value: { content: 'Read this', messageId: 'pdf', context: [{ block: { $case: 'binary', value: { mimeType: 'application/pdf', data: Buffer.from('%PDF-1.7') } } }] } });
    s.send({ $case: 'userMessage', value: { content: 'Huge', messageId: 'big', context: [{ block: { $case: 'binary', value: { mimeType: 'image/png', data: Buffer.alloc(2 * 1024 * 1024 + 1) } } }] } });
    await s.waitFor(() => s.of('error').length >= refusals + 2);
    const errors = s.of('error').slice(refusals);
    expect(errors.map((e) => e.code)).toEqual(['invalid_argument', 'invalid_argument']);
    expect(errors[0]!.message).toMatch(/mime_type must be one of image\/png, image\/jpeg, image\/gif, image\/webp, got "application\/pdf"/);
    expect(errors[1]!.message).toMatch(/at most 2097152 bytes, got 2097153/);
    expect(await eventCount()).toBe(before);
    const bad = await api.post(`/api/sessions/${sessionId}/messages`, { content: 'x', images: [{ mime_type: 'image/png', data: 'not base64!' }] });
    expect(bad.status).toBe(400);
    expect(await eventCount()).toBe(before);

    s.send({ $case: 'userMessage', value: { content: 'What is in the picture?', messageId: 'img', context: [{ label: 'screen', block: { $case: 'binary', value: { mimeType: 'image/png', data: png } } }] } });
    await s.waitForCase('turnComplete');
    expect(s.of('textDelta').map((d) => d.content).join('')).toBe(`Scripted answer to "What is in the picture?" seeing 1 image(s): image/png ${png.length} bytes`);
    const page = await api.get<{ events: { event_type: string; payload: Record<string, unknown> }[] }>(`/api/sessions/${sessionId}/events?limit=1000`);
    expect(page.body.events.find((e) => e.event_type === 'user_message')!.payload).toMatchObject({ message_id: 'img', content: 'What is in the picture?', images: 1 });
    const { body } = await api.get<{ messages: { role: string; content: unknown }[] }>(`/api/sessions/${sessionId}/messages`);
    expect(body.messages[0]!.content).toEqual([
      { type: 'text', text: 'What is in the picture?' },
      { type: 'image_url', image_url: { url: `data:image/png;base64,${png.toString('base64')}` } },
    ]);
    s.end();
  });
});

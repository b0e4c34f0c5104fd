import * as grpc from '@grpc/grpc-js';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { TEST_API_KEY, assertContiguous, grpcClient, httpClient, waitUntil } from '@cadre/testing';
import { kontekst, type SessionResponse } from '@cadre/protocol';
import { SessionStream, sessionEvents, type SessionLogEvent } from './support/session-client.ts';
import { Scrape } from './support/prometheus.ts';
import { readSse } from './support/sse.ts';
import { TestStack } from './support/stack.ts';

// SIGTERM on a gateway process while sessions stream through it over StreamSession, SSE and /ws: the turns go on
// on the workers, every stream ends in a way its client can act on, and a client resuming on another gateway
// from its cursor gets the rest of the turn — nothing lost, nothing twice.
const GRPC_SESSIONS = 10;
const SSE_SESSIONS = 5;
const WS_SESSIONS = 5;
// ~100 chunks 40 ms apart: the turn is mid-answer when the signal comes and outlives the gateway.
const LONG = 'Tell a long story [[scripted:words=300]] [[scripted:chunk_delay=40]]';
let stack: TestStack;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 1, env: { WORKER_CONCURRENCY: '24' } });
});
afterAll(async () => {
  await stack?.stop();
});

/** The log up to the turn's end (an `activity` idle follows turn_complete). */
async function turnEvents(sessionId: string): Promise<SessionLogEvent[]> {
  const log = await sessionEvents(stack.url, sessionId);
  return log.slice(0, log.findIndex((e) => e.event_type === 'turn_complete') + 1);
}
async function answer(sessionId: string): Promise<string> {
  const { messages } = (await httpClient(stack.url).get<{ messages: { role: string; content: string }[] }>(`/api/sessions/${sessionId}/messages`)).body;
  return messages.at(-1)!.content;
}
// Session events roz has no frame for (session-frames.ts): a StreamSession client never sees their seqs.
const NO_ROZ_FRAME = new Set(['user_message', 'tool_result', 'tools_registered', 'session_closed', 'input_queued', 'input_delivered', 'input_dropped', 'approval_requested', 'approval_resolved']);
const logged = (f: SessionResponse): boolean => f.seq > 0;
const textOf = (frames: SessionResponse[]): string => frames.map((f) => (f.response?.$case === 'textDelta' ? f.response.value.content : '')).join('');

/** A WindieOS /ws client: every server message, and how the socket closed. */
class WindieClient {
  readonly messages: { type: string; payload: Record<string, any> }[] = [];
  readonly ws: WebSocket;
  readonly closed: Promise<{ code: number; reason: string }>;

  constructor(port: number) {
    this.ws = new WebSocket(`ws://127.0.0.1:${port}/ws`, { headers: { authorization: `Bearer ${TEST_API_KEY}` } });
    this.ws.on('message', (data) => this.messages.push(JSON.parse(data.toString())));
    this.closed = new Promise((resolve) => this.ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  }

  async handshake(): Promise<void> {
    await new Promise((resolve, reject) => this.ws.once('open', resolve).once('error', reject));
    this.ws.send(JSON.stringify({ type: 'handshake', user_id: 'drain' }));
  }

  async query(text: string, ref: string): Promise<void> {
    await this.handshake();
    this.ws.send(JSON.stringify({ id: randomUUID(), type: 'query', payload: { text, conversation_ref: ref } }));
  }
}

/** A kontekst Run call that sends nothing; resolves with the status that ends it. */
function idleKontekstRun(port: number): { client: grpc.Client; status: Promise<grpc.StatusObject> } {
  const client = new kontekst.AgentServiceClient(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const metadata = new grpc.Metadata();
  metadata.set('authorization', `Bearer ${TEST_API_KEY}`);
  const call = client.run(metadata);
  const status = new Promise<grpc.StatusObject>((resolve) => call.on('error', resolve).on('status', resolve));
  return { client, status };
}

describe('gateway SIGTERM with session streams open', () => {
  it('ends StreamSession (UNAVAILABLE), SSE (error event) and /ws (1001) resumably; the turns finish; resumed clients miss nothing and see nothing twice', async () => {
    const leaving = await stack.spawnGatewayProcess({ WORKER_CONCURRENCY: '24' });
    const leavingGrpc = grpcClient(`127.0.0.1:${leaving.port}`);
    const staying = grpcClient(stack.grpcTarget);
    try {
      const grpcCalls = await Promise.all(Array.from({ length: GRPC_SESSIONS }, async (_, i) => {
        const call = new SessionStream(leavingGrpc);
        call.send({ $case: 'start', value: { environmentId: 'drain' } });
        const started = await call.waitForCase('sessionStarted');
        call.send({ $case: 'userMessage', value: { content: LONG, messageId: `m-${i}` } });
        return { call, sessionId: started.sessionId };
      }));
      const api = httpClient(leaving.url);
      const sseStreams = await Promise.all(Array.from({ length: SSE_SESSIONS }, async () => {
        const sessionId = (await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'drain' })).body.session.session_id;
        let streaming!: () => void;
        const firstDelta = new Promise<void>((resolve) => (streaming = resolve));
        const cut = readSse(`${leaving.url}/api/sessions/${sessionId}/stream`, 0, { onEvent: (f) => f.event_type === 'text_delta' && streaming() });
        expect((await api.post(`/api/sessions/${sessionId}/messages`, { content: LONG })).status).toBe(202);
        await firstDelta;
        return { sessionId, cut };
      }));
      const sockets = await Promise.all(Array.from({ length: WS_SESSIONS }, async (_, i) => {
        const socket = new WindieClient(leaving.port);
        await socket.query(LONG, `conv-${i}`);
        return socket;
      }));
      // And calls with no session yet: a socket, a StreamSession and a kontekst Run that have sent nothing.
      const idle = new WindieClient(leaving.port);
      await idle.handshake();
      const idleStream = new SessionStream(leavingGrpc);
      const idleRun = idleKontekstRun(leaving.port);
      await waitUntil('the idle calls to be open', async () => {
        const scrape = await Scrape.of(`${leaving.url}/metrics`);
        return scrape.value('cadre_sessions_open', { protocol: 'roz' }) === GRPC_SESSIONS + 1 && scrape.value('cadre_sessions_open', { protocol: 'kontekst' }) === 1;
      });
      // Every stream has its answer flowing when the signal comes.
      for (const { call } of grpcCalls) await call.waitForCase('textDelta');
      for (const socket of sockets) await waitUntil('the /ws answer to stream', () => socket.messages.some((m) => m.type === 'streaming-response'));

      const exited = new Promise<number | null>((resolve) => leaving.child.once('exit', resolve));
      leaving.child.kill('SIGTERM');
      expect(await exited).toBe(0);

      for (const idleCall of [await idleStream.status, await idleRun.status]) expect(idleCall).toMatchObject({ code: grpc.status.UNAVAILABLE, details: 'gateway is shutting down' });
      idleRun.client.close();

      // gRPC: a status the client retries on, after what the gateway had; resumes on the other gateway from its cursor.
      for (const { call, sessionId } of grpcCalls) {
        const status = await call.status;
        expect(status.code).toBe(grpc.status.UNAVAILABLE);
        expect(status.details).toMatch(/shutting down/);
        const cursor = Math.max(...call.frames.filter(logged).map((f) => f.seq));
        const resumed = new SessionStream(staying);
        resumed.send({ $case: 'start', value: { sessionId, afterSeq: cursor } });
        await resumed.waitForCase('turnComplete', 60_000);
        resumed.end();
        expect((await resumed.status).code).toBe(grpc.status.OK);
        const log = await turnEvents(sessionId);
        const seen = [...call.frames, ...resumed.frames].filter(logged).map((f) => f.seq).filter((seq) => seq <= log.at(-1)!.seq);
        expect(resumed.frames.filter(logged).every((f) => f.seq > cursor)).toBe(true);
        expect(seen).toEqual(log.filter((e) => !NO_ROZ_FRAME.has(e.event_type)).map((e) => e.seq));
        expect(textOf([...call.frames, ...resumed.frames])).toBe(await answer(sessionId));
        expect(log.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['end_turn']);
      }

      // SSE: an error event with the last seq sent; Last-Event-ID / after_seq on the other gateway gives the rest.
      for (const { sessionId, cut } of sseStreams) {
        const before = await cut;
        expect(before.error).toMatchObject({ code: 'unavailable', last_seq: before.seqs.at(-1) });
        const rest = await readSse(`${stack.url}/api/sessions/${sessionId}/stream`, before.error!.last_seq, { until: (f) => f.event_type === 'turn_complete' });
        const seqs = [...before.seqs, ...rest.seqs];
        assertContiguous(seqs);
        expect(seqs).toEqual((await turnEvents(sessionId)).map((e) => e.seq));
        const text = [...before.frames, ...rest.frames].filter((f) => f.event_type === 'text_delta').map((f) => f.data.payload.content).join('');
        expect(text).toBe(await answer(sessionId));
      }

      // /ws: "going away", nothing else; the conversation goes on through another gateway.
      expect(await idle.closed).toEqual({ code: 1001, reason: 'gateway is shutting down' });
      for (const [i, socket] of sockets.entries()) {
        expect(await socket.closed).toEqual({ code: 1001, reason: 'gateway is shutting down' });
        expect(socket.messages.filter((m) => m.type === 'error')).toEqual([]);
        const again = new WindieClient(stack.gateways[0]!.port);
        await again.query('And then? [[scripted:words=0]] [[scripted:chunk_delay=0]]', `conv-${i}`);
        await waitUntil('the next answer on the other gateway', () => again.messages.some((m) => m.type === 'streaming-complete' && /^Scripted answer to "And then\?/.test(m.payload.final_response)), { timeoutMs: 60_000 });
        again.ws.close();
      }
    } finally {
      leavingGrpc.close();
      staying.close();
      leaving.child.kill('SIGKILL');
    }
  }, 120_000);
});

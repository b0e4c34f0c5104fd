// Load generator for streaming.bench.ts and ws.bench.ts, in a process of its own. mode cadre: N StreamSession calls
// (grpc-js, 4 channels), each sending `turns` UserMessages one after another and reading its TextDeltas. mode ws:
// N /ws sockets (the WindieOS protocol), each sending `turns` queries on its own conversation_ref and reading its
// streaming-response messages up to streaming-complete. mode raw: the same
// N × turns model streams read directly with the `openai` package from the scripted model. Each text delta's
// arrival is stamped here; the chunks it covers give its lags (see TurnLags). In mode cadre each turn's send and
// first delta are also stamped on the wall clock (ms, the clock BullMQ's job records and the session log use) with
// its session id, so the bench can split the first delta's time by what Redis recorded (streaming.bench.ts).
import OpenAI from 'openai';
import { SessionRequest, type AgentServiceClient } from '@cadre/protocol';
import * as grpc from '@grpc/grpc-js';
import WebSocket from 'ws';
import { BENCH_API_KEY, grpcChannels } from '../support/harness.ts';
import { argJson, commands, emit, f64ToBase64 } from '../support/child.ts';
import type { TurnStamp } from '../support/turn-split.ts';

const o = argJson<{ mode: 'cadre' | 'raw' | 'ws'; target?: string; modelUrl?: string }>();

interface Run {
  sessions: number;
  turns: number;
  prompt: string;
  chunkDelayMs: number;
  /**
   * Arrivals spread instead of sent at once: session i sends its first message i × spreadMs / sessions after the
   * start, and each session its next one as its turn ends, so the sessions keep their phases and about `sessions`
   * turns stream at any time. The first turn of each (the ramp, at rising concurrency) is run and not recorded.
   */
  spreadMs?: number;
}

/** Words the scripted model streams per chunk (libs/scripted-model README: "in groups of three words"). */
const WORDS_PER_CHUNK = 3;

/** The model chunks a text delta carries, by word count (the same on both sides): [first, end). */
function chunksOf(before: string, text: string): [first: number, end: number] {
  const words = (s: string): number => s.split(/\s+/).filter(Boolean).length;
  const first = Math.floor(words(before) / WORDS_PER_CHUNK);
  return [first, Math.max(Math.ceil(words(before + text) / WORDS_PER_CHUNK), first + 1)];
}

/**
 * A turn's chunk lags, two ways. `fromSend`: each chunk's arrival (ms after the message was sent) minus the time the
 * model's pacing (chunk_delay) scheduled it at, so the turn's start-up (the first delta's wait) is in every chunk's
 * lag. `relay`: for chunks after the first delta, the arrival after the first delta minus the pacing since the first
 * delta's last chunk: what each later delta waits in transit once the stream has begun (its start-up is the first
 * delta's own figure). Coalescing shows as lag on all but a frame's last chunk, in both.
 */
class TurnLags {
  private firstAt = -1;
  private firstEnd = 0;
  private readonly chunkDelayMs: number;
  private readonly fromSend: number[];
  private readonly relay: number[];

  constructor(chunkDelayMs: number, fromSend: number[], relay: number[]) {
    this.chunkDelayMs = chunkDelayMs;
    this.fromSend = fromSend;
    this.relay = relay;
  }

  delta(before: string, text: string, at: number): void {
    const [first, end] = chunksOf(before, text);
    for (let chunk = first; chunk < end; chunk++) this.fromSend.push(at - chunk * this.chunkDelayMs);
    if (this.firstAt < 0) {
      this.firstAt = at;
      this.firstEnd = end;
      return;
    }
    for (let chunk = first; chunk < end; chunk++) this.relay.push(at - this.firstAt - (chunk - (this.firstEnd - 1)) * this.chunkDelayMs);
  }
}

type Turn = (prompt: string, onText: (text: string) => void) => Promise<void>;
/** `id`: the session's id, where the protocol names it (StreamSession's SessionStarted). */
let openSession: () => Promise<{ turn: Turn; close: () => void; id?: string }>;

// Date.now(), as the gateway, the worker and BullMQ stamp: performance.timeOrigin + now() drifts from the wall clock
// over a long-lived process (the clock is slewed after timeOrigin is fixed), which showed as negative steps.
const wallMs = (): number => Date.now();

if (o.mode === 'raw') {
  const client = new OpenAI({ baseURL: o.modelUrl!, apiKey: 'scripted', maxRetries: 0 });
  openSession = async () => ({
    turn: async (prompt, onText) => {
      const stream = await client.chat.completions.create({ model: 'cadre-scripted', stream: true, messages: [{ role: 'user', content: prompt }] });
      for await (const chunk of stream) {
        const text = chunk.choices[0]?.delta?.content;
        if (text) onText(text);
      }
    },
    close: () => undefined,
  });
} else if (o.mode === 'ws') {
  let next = 0;
  openSession = async () => {
    const socket = new WebSocket(`ws://${o.target!}/ws`, { headers: { authorization: `Bearer ${BENCH_API_KEY}` } });
    await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
    socket.send(JSON.stringify({ type: 'handshake', user_id: 'bench' }));
    const ref = `bench-${process.pid}-${next++}`;
    let onMessage: (m: { type: string; payload: { text?: string; message?: string } }) => void = () => undefined;
    socket.on('message', (data) => onMessage(JSON.parse(data.toString()) as never));
    let id = 0;
    return {
      turn: (prompt, onText) => new Promise<void>((resolve, reject) => {
        onMessage = (m) => {
          if (m.type === 'streaming-response') onText(m.payload.text ?? '');
          else if (m.type === 'streaming-complete') resolve();
          else if (m.type === 'error') reject(new Error(`ws error: ${m.payload.message ?? ''}`));
        };
        socket.send(JSON.stringify({ id: `${ref}-${id++}`, type: 'query', payload: { text: prompt, conversation_ref: ref } }));
      }),
      close: () => socket.close(),
    };
  };
} else {
  const channels = grpcChannels(o.target!, 4) as AgentServiceClient[];
  let next = 0;
  openSession = async () => {
    const metadata = new grpc.Metadata();
    metadata.set('authorization', `Bearer ${BENCH_API_KEY}`);
    const call = channels[next++ % channels.length]!.streamSession(metadata);
    let onFrame: (f: { response?: { $case: string; value: { content?: string; sessionId?: string } } }) => void = () => undefined;
    call.on('data', (f) => onFrame(f));
    call.on('error', () => undefined);
    const started = new Promise<string>((resolve) => (onFrame = (f) => f.response?.$case === 'sessionStarted' && resolve(f.response.value.sessionId ?? '')));
    call.write(SessionRequest.fromPartial({ request: { $case: 'start', value: { environmentId: 'bench' } } }));
    const id = await started;
    return {
      id,
      turn: (prompt, onText) => new Promise<void>((resolve, reject) => {
        onFrame = (f) => {
          if (f.response?.$case === 'textDelta') onText(f.response.value.content ?? '');
          else if (f.response?.$case === 'turnComplete') resolve();
          else if (f.response?.$case === 'error') reject(new Error(`session error: ${JSON.stringify(f.response.value)}`));
        };
        call.write(SessionRequest.fromPartial({ request: { $case: 'userMessage', value: { content: prompt } } }));
      }),
      close: () => call.end(),
    };
  };
}

for await (const cmd of commands<Run & { cmd: string }>()) {
  if (cmd.cmd !== 'run') break;
  const sessions = await Promise.all(Array.from({ length: cmd.sessions }, () => openSession()));
  const first: number[] = [];
  const lags: number[] = [];
  const relayLags: number[] = [];
  const stamps: TurnStamp[] = [];
  let deltas = 0;
  const started = performance.now();
  const spread = cmd.spreadMs ?? 0;
  let turns = 0;
  await Promise.all(sessions.map(async (s, i) => {
    if (spread > 0) await new Promise((resolve) => setTimeout(resolve, (i * spread) / cmd.sessions));
    for (let t = 0; t < cmd.turns; t++) {
      const recorded = spread === 0 || t > 0;
      let text = '';
      const turnLags = recorded ? new TurnLags(cmd.chunkDelayMs, lags, relayLags) : new TurnLags(cmd.chunkDelayMs, [], []);
      const t0 = performance.now();
      const sentMs = wallMs();
      await s.turn(cmd.prompt, (delta) => {
        const at = performance.now() - t0;
        if (text === '' && recorded) {
          first.push(at);
          if (s.id) stamps.push({ session: s.id, turn: t + 1, sent_ms: sentMs, first_ms: sentMs + at });
        }
        if (recorded) deltas++;
        turnLags.delta(text, delta, at);
        text += delta;
      });
      if (recorded) turns++;
    }
  }));
  const seconds = (performance.now() - started) / 1000;
  for (const s of sessions) s.close();
  emit('done', { first: f64ToBase64(Float64Array.from(first)), lags: f64ToBase64(Float64Array.from(lags)), relay_lags: f64ToBase64(Float64Array.from(relayLags)), turns, turns_run: cmd.sessions * cmd.turns, deltas, seconds, ...(stamps.length > 0 && { stamps }) });
}
process.exit(0);

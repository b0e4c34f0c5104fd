import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { SessionEngine, SessionQueue } from '@cadre/session';
import { EventFanout, KeyBuilder, SessionStore } from '@cadre/store';
import { AgentServiceService } from '@cadre/protocol';
import { TEST_API_KEY, grpcClient, startTestRedis, waitUntil, type TestRedis } from '@cadre/testing';
import { Authenticator } from '../apps/gateway/src/auth.ts';
import { GATEWAY_SHUTTING_DOWN } from '../apps/gateway/src/errors.ts';
import { kontekstAgentService } from '../apps/gateway/src/grpc/kontekst.service.ts';
import { streamSession } from '../apps/gateway/src/grpc/session.stream.ts';
import { KontekstRun } from './support/kontekst-run.ts';
import { SessionStream } from './support/session-client.ts';

// The session edges' bidi calls (kontekst's Run, roz's StreamSession) against a gateway drain, with the edges' parts
// built here as the gateway builds them (real Redis, store, fan-out and session engine; a real grpc-js server and
// client on port 0). The test holds what a whole gateway cannot: the drain's signal without the rest of its close,
// which quits Redis and closes the fan-out a few ms after the status and so hides whatever the call still does then
// (tests/kontekst.int.test.ts drains a whole gateway), and a start stopped at its watch until the test lets it go on.
// No worker runs: a started turn stays `running` with its job in the queue.
let server: TestRedis;
let redis: Redis;
let queue: SessionQueue;
const keys = new KeyBuilder(`edges${process.pid}`);

beforeAll(async () => {
  server = await startTestRedis();
  redis = new Redis(server.url);
  queue = new SessionQueue({ connection: redis, keys, onError: () => undefined });
});
afterAll(async () => {
  await queue?.close();
  redis?.disconnect();
  await server?.stop();
});

interface Edge {
  target: string;
  engine: SessionEngine;
  store: SessionStore;
  fanout: EventFanout;
  /** What the gateway aborts first when it drains. */
  draining: AbortController;
  /** Calls open, Run and StreamSession (the edges' onOpen/onClose, which cadre_sessions_open counts). */
  open(): number;
  /** Ends the server once every connection is gone (grpc-js has reported every call's end by then). */
  close(): Promise<void>;
}

/**
 * The edge's parts; whatever the test leaves open when it ends (a failed assertion included) is closed then: the
 * server at once, with every call still on it, and the fan-out's subscriber, so nothing is left to the next test.
 */
async function startEdge(): Promise<Edge> {
  const store = new SessionStore({ redis, keys });
  const subscriber = new Redis(server.url);
  const fanout = new EventFanout({ keys, subscriber });
  const engine = new SessionEngine({ store, queue, fanout, defaultModel: 'cadre-scripted' });
  const draining = new AbortController();
  let open = 0;
  const edge = {
    auth: new Authenticator({ apiKey: TEST_API_KEY, workspaceKeys: new Map(), devMode: false }),
    sessions: engine, logger: pino({ level: 'silent' }), onOpen: () => open++, onClose: () => open--, draining: draining.signal,
  };
  const service = kontekstAgentService({ ...edge, approvalTimeoutSecs: 600 });
  const grpcServer = new grpc.Server();
  grpcServer.addService(service.definition, service.implementation);
  grpcServer.addService(AgentServiceService as unknown as grpc.ServiceDefinition, { streamSession: streamSession({ ...edge, keepaliveMs: 15_000 }) } as unknown as grpc.UntypedServiceImplementation);
  const port = await new Promise<number>((resolve, reject) => {
    grpcServer.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound)));
  });
  let closed: Promise<void> | undefined;
  onTestFinished(async () => {
    if (closed) return closed;
    grpcServer.forceShutdown();
    await fanout.close();
  });
  return {
    target: `127.0.0.1:${port}`, engine, store, fanout, draining, open: () => open,
    close: () => (closed ??= (async () => {
      await new Promise<void>((resolve) => grpcServer.tryShutdown(() => resolve()));
      await fanout.close();
    })()),
  };
}

/** A kontekst Run call on `edge`, its client closed when the test ends. */
function runOn(edge: Edge): KontekstRun {
  const run = new KontekstRun(edge.target);
  onTestFinished(() => run.close());
  return run;
}

/** A StreamSession call on `edge`, its client closed when the test ends. */
function streamOn(edge: Edge): SessionStream {
  const client = grpcClient(edge.target);
  onTestFinished(() => client.close());
  return new SessionStream(client);
}

/** Stops every start of `engine` at its watch until release(); `reached` names the session, `watched` follows the watch. */
function holdWatch(engine: SessionEngine): { reached: Promise<string>; watched: Promise<void>; release(): void } {
  const watch = engine.watch.bind(engine);
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let reach!: (sessionId: string) => void;
  const reached = new Promise<string>((resolve) => (reach = resolve));
  let done!: () => void;
  const watched = new Promise<void>((resolve) => (done = resolve));
  engine.watch = async (scope, sessionId, afterSeq) => {
    reach(sessionId);
    await gate;
    try {
      return await watch(scope, sessionId, afterSeq);
    } finally {
      done();
    }
  };
  return { reached, watched, release };
}

/**
 * Drains the gateway while `held` holds a start at its watch: the call ends UNAVAILABLE at once and is no longer
 * counted. Then lets the start go on, which must close the watch it opens (nothing else would: no event is coming).
 */
async function drainHeld(edge: Edge, held: ReturnType<typeof holdWatch>, status: Promise<grpc.StatusObject>): Promise<void> {
  edge.draining.abort();
  expect(await status).toMatchObject({ code: grpc.status.UNAVAILABLE, details: GATEWAY_SHUTTING_DOWN });
  expect(edge.open()).toBe(0);
  held.release();
  await held.watched;
  await waitUntil('the start to close its watch', () => edge.fanout.watcherCount() === 0, { timeoutMs: 5_000 });
}

/** Counts the engine's calls of `method` from now on (each call goes ahead as before). */
function countCalls<M extends 'cancelTurn' | 'pendingToolRequests'>(engine: SessionEngine, method: M): () => number {
  let calls = 0;
  const original = engine[method].bind(engine) as (...args: unknown[]) => unknown;
  engine[method] = ((...args: unknown[]) => {
    calls++;
    return original(...args);
  }) as SessionEngine[M];
  return () => calls;
}

const eventTypes = async (store: SessionStore, sessionId: string): Promise<string[]> => (await store.readEvents(sessionId, 0, 100))!.events.map((e) => e.event_type);

const start = (sessionId = '') => ({ $case: 'start' as const, value: { prompt: 'Hello', sessionId, agentName: '', workingDir: '' } });

describe('kontekst Run and a gateway drain', () => {
  it('a drain while a start is in flight ends the call with the drain\'s status at once; the start then closes its watch and starts no turn', async () => {
    const edge = await startEdge();
    const held = holdWatch(edge.engine);
    const run = runOn(edge);
    run.send(start());
    // The start has created its session and stops at its watch.
    const sessionId = await held.reached;
    // The start goes on: its watch is registered, and closed, and the turn the client was told nothing of never starts.
    await drainHeld(edge, held, run.status);
    expect((await edge.store.getSession(sessionId))!.status).toBe('idle');
    expect(await eventTypes(edge.store, sessionId)).toEqual(['session_started']);
    expect(run.events).toEqual([]);
  });

  it('a start drained in flight that would have been refused (a turn is in progress) closes its watch too: nothing waits for an event to go', async () => {
    const edge = await startEdge();
    const { session_id: sessionId } = await edge.engine.create({ workspaces: 'all' }, { workspace_id: 'default' });
    await edge.engine.sendMessage({ workspaces: 'all' }, sessionId, { content: 'Another client\'s turn' });
    const held = holdWatch(edge.engine);
    const run = runOn(edge);
    run.send(start(sessionId));
    await held.reached;
    // Without a turn of its own the watch would hear nothing it waits for: it must be closed by the start itself.
    await drainHeld(edge, held, run.status);
    // The other client's turn is untouched.
    expect((await edge.store.getSession(sessionId))!.status).toBe('running');
    expect(await eventTypes(edge.store, sessionId)).toEqual(['session_started', 'user_message']);
  });

  it('a drain leaves a started run\'s turn as it is: the call\'s end, which grpc-js reports after the drain\'s status, cancels nothing', async () => {
    const edge = await startEdge();
    const cancels = countCalls(edge.engine, 'cancelTurn');
    const run = runOn(edge);
    run.send(start());
    const started = await run.waitFor('started');
    edge.draining.abort();
    expect((await run.status).code).toBe(grpc.status.UNAVAILABLE);
    run.close();
    // Every connection gone: grpc-js has emitted the server call's 'cancelled' by now, and Redis is still up.
    await edge.close();
    expect(cancels()).toBe(0);
    expect((await edge.store.getSession(started.sessionId))!.status).toBe('running');
    expect(await eventTypes(edge.store, started.sessionId)).toEqual(['session_started', 'user_message']);
  });
});

describe('roz StreamSession and a gateway drain', () => {
  it('a drain while a resume is in flight ends the call UNAVAILABLE at once; the resume then closes its watch (nothing waits for an event to go)', async () => {
    const edge = await startEdge();
    const { session_id: sessionId } = await edge.engine.create({ workspaces: 'all' }, { workspace_id: 'default' });
    const held = holdWatch(edge.engine);
    const stream = streamOn(edge);
    // A client back after a lost stream, with everything up to the session's last seq: nothing is left to send it.
    stream.send({ $case: 'start', value: { sessionId, afterSeq: 1 } });
    await held.reached;
    // The session has no turn: a watch kept would wait for an event to end on as long as the session lives.
    await drainHeld(edge, held, stream.status);
    expect(await eventTypes(edge.store, sessionId)).toEqual(['session_started']);
    expect(stream.frames).toEqual([]);
  });

  it('a drain while a new session\'s start is in flight ends the call UNAVAILABLE at once; the start then closes its watch and serves nothing', async () => {
    const edge = await startEdge();
    const held = holdWatch(edge.engine);
    // What a start that goes on serving its call reads first (a ToolRequest to send again), before its log.
    const served = countCalls(edge.engine, 'pendingToolRequests');
    const stream = streamOn(edge);
    stream.send({ $case: 'start', value: { environmentId: 'default' } });
    // The start has created its session and stops at its watch (from seq 0: the session's whole log).
    const sessionId = await held.reached;
    await drainHeld(edge, held, stream.status);
    // The start stopped at its watch: it neither served the call it was told had ended (its pending requests, its
    // log, the keepalive a turn's call gets) nor touched the session, which is idle with its first event only.
    expect(served()).toBe(0);
    expect((await edge.store.getSession(sessionId))!.status).toBe('idle');
    expect(await eventTypes(edge.store, sessionId)).toEqual(['session_started']);
    expect(stream.frames).toEqual([]);
  });
});

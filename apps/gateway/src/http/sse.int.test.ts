import http from 'node:http';
import fastify from 'fastify';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { SessionEngine, SessionQueue } from '@cadre/session';
import { EventFanout, KeyBuilder, SessionStore } from '@cadre/store';
import { startTestRedis, type TestRedis } from '@cadre/testing';
import { SseSessions } from './sse.ts';

// An SSE stream whose client goes away while the gateway is still opening its watch (the session's head read,
// the cursor check): real Redis, fan-out and session engine, a real HTTP server and client. The route holds the
// watch until the test lets it go on, as a slow Redis would.
let server: TestRedis;
let redis: Redis;
let subscriber: Redis;
let queue: SessionQueue;
const keys = new KeyBuilder(`sse${process.pid}`);

beforeAll(async () => {
  server = await startTestRedis();
  redis = new Redis(server.url);
  subscriber = new Redis(server.url);
  queue = new SessionQueue({ connection: redis, keys, onError: () => undefined });
});
afterAll(async () => {
  await queue?.close();
  redis?.disconnect();
  subscriber?.disconnect();
  await server?.stop();
});

describe('SSE and a client gone before its stream is served', () => {
  it('a client that closed while the watch was opening leaves no watcher behind (an idle session would hold it for its whole life)', async () => {
    const store = new SessionStore({ redis, keys });
    const fanout = new EventFanout({ keys, subscriber });
    onTestFinished(() => fanout.close());
    const engine = new SessionEngine({ store, queue, fanout, defaultModel: 'cadre-scripted' });
    const { session_id: sessionId } = await engine.create({ workspaces: 'all' }, { workspace_id: 'default' });
    const sse = new SseSessions({ logger: pino({ level: 'silent' }) });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let clientGone!: () => void;
    const gone = new Promise<void>((resolve) => (clientGone = resolve));
    let reach!: () => void;
    const reached = new Promise<void>((resolve) => (reach = resolve));
    let served!: () => void;
    const done = new Promise<void>((resolve) => (served = resolve));
    const app = fastify();
    // Closed even when an assertion fails, before the fan-out (hooks run last-registered first).
    onTestFinished(() => app.close());
    app.get('/stream', async (request, reply) => {
      request.raw.socket.once('close', clientGone);
      reach();
      await gate;
      // Resumed at the session's last seq: nothing is left to send, so only the client's close can end the watch.
      sse.serve(request, reply, await engine.watch({ workspaces: 'all' }, sessionId, 1), 'session');
      served();
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as { port: number };

    const req = http.get({ host: '127.0.0.1', port, path: '/stream' });
    req.on('error', () => undefined);
    await reached;
    req.destroy();
    await gone;
    release();
    await done;
    await expect.poll(() => fanout.watcherCount(), { timeout: 5_000 }).toBe(0);
    expect(sse.count()).toBe(0);
  });
});

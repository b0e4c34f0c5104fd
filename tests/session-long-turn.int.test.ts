import { afterAll, beforeAll, expect, it } from 'vitest';
import { createModelClient } from '@cadre/agent';
import { startScriptedModel, type ScriptedModel } from '@cadre/scripted-model';
import { SessionQueue, TurnRunner } from '@cadre/session';
import { KeyBuilder, SessionStore } from '@cadre/store';
import { startTestRedis, waitUntil, type TestRedis, type TestRedisClient } from '@cadre/testing';

// A turn that runs longer than its session's idle TTL: the turn runner (real Redis, the scripted model over HTTP)
// with a TTL of 3 s, which no process's config allows (60 s at least), so the runner is built here as the worker
// builds it. First many steps, each shorter than half the TTL, the whole turn longer than the TTL; then one model
// call alone longer than the TTL.
const IDLE_TTL_SEC = 3;
const WAITS = 6;
const WAIT_MS = 700;
const LONG_ANSWER_MS = IDLE_TTL_SEC * 1500;

let server: TestRedis;
let redis: TestRedisClient;
let model: ScriptedModel;
let queue: SessionQueue;
const keys = new KeyBuilder(`longturn${process.pid}`);

beforeAll(async () => {
  server = await startTestRedis();
  redis = server.connect();
  model = await startScriptedModel();
  queue = new SessionQueue({ connection: redis, keys, onError: () => undefined });
});
afterAll(async () => {
  await queue?.close();
  await model?.close();
  redis?.disconnect();
  await server?.stop();
});

async function sessionAndRunner(): Promise<{ store: SessionStore; runner: TurnRunner; id: string }> {
  const store = new SessionStore({ redis, keys, idleTtlSec: IDLE_TTL_SEC });
  const runner = new TurnRunner({ store, queue, model: createModelClient({ baseURL: model.url, apiKey: 'test' }), hostId: 'test-host' });
  const { session_id: id } = await store.createSession({
    workspace_id: 'ws-long', model: 'cadre-scripted', tools: [], transcript: [], project_context: [], system_context: '', max_context_tokens: 100_000, approval_policy: [], stop_on_denial: false,
  });
  return { store, runner, id };
}

async function redisNow(): Promise<number> {
  const [seconds, micros] = await redis.time();
  return Number(seconds) * 1000 + Number(micros) / 1000;
}

it('a turn longer than the idle TTL keeps its session: it ends turn_complete, every key present and expiring together', async () => {
  const { store, runner, id } = await sessionAndRunner();
  const calls = Array.from({ length: WAITS }, () => `[[scripted:call=wait({"ms":${WAIT_MS}})]]`).join(' ');
  const wake = await store.startTurn(id, { message_id: 'm1', content: `take your time ${calls}` });
  const firstExpiry = await redis.pexpiretime(keys.session(id).meta);

  const turn = await runner.claim(id, wake, 'lease-1');
  expect(await runner.run(turn!, new AbortController().signal)).toBe('finished');

  const events = (await store.readEvents(id, 0, 1_000))!.events;
  expect(events.filter((e) => e.event_type === 'tool_result').map((e) => (e.payload as { success: boolean }).success)).toEqual(Array(WAITS).fill(true));
  expect(events.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload)).toMatchObject([{ stop_reason: 'end_turn' }]);
  // The turn outlived the expiry its start gave the session; every key it has is still there, expiring at one
  // millisecond (it had no client calls, queued inputs, approvals or grants).
  expect(await redisNow()).toBeGreaterThan(firstExpiry);
  const k = keys.session(id);
  const expiries = await Promise.all([k.meta, k.events, k.transcript].map((key) => redis.pexpiretime(key)));
  expect(expiries[0]).toBeGreaterThan(firstExpiry);
  expect(expiries).toEqual(Array(3).fill(expiries[0]));
  const absent = await Promise.all([k.calls, k.steer, k.followUp, k.approvals, k.grants].map((key) => redis.exists(key)));
  expect(absent).toEqual([0, 0, 0, 0, 0]);
  expect((await store.transcript(id)).length).toBe(2 + 2 * WAITS);
});

it('a single model call longer than the idle TTL keeps its session while it runs, and the keys expire once the session is idle for the TTL', async () => {
  const { store, runner, id } = await sessionAndRunner();
  const wake = await store.startTurn(id, { message_id: 'm1', content: `think it over [[scripted:delay=${LONG_ANSWER_MS}]]` });
  const firstExpiry = await redis.pexpiretime(keys.session(id).meta);

  const turn = await runner.claim(id, wake, 'lease-1');
  expect(await runner.run(turn!, new AbortController().signal)).toBe('finished');
  const endedAt = await redisNow();

  // The one step outlived the expiry the turn's start gave the session, and the session and its log are still there.
  expect(endedAt).toBeGreaterThan(firstExpiry);
  const events = (await store.readEvents(id, 0, 1_000))!.events;
  expect(events.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload)).toMatchObject([{ stop_reason: 'end_turn' }]);
  expect((await store.transcript(id)).length).toBe(2);
  const k = keys.session(id);
  const expiries = await Promise.all([k.meta, k.events, k.transcript].map((key) => redis.pexpiretime(key)));
  expect(expiries).toEqual(Array(3).fill(expiries[0]));

  // Nothing immortal: idle since the turn ended, every key is gone the idle TTL later (the keep-alive stopped with it).
  expect(expiries[0]).toBeLessThanOrEqual(endedAt + IDLE_TTL_SEC * 1000);
  await waitUntil('the idle session\'s keys to expire', async () => {
    const present = await Promise.all([k.meta, k.events, k.transcript].map((key) => redis.exists(key)));
    return present.every((n) => n === 0);
  }, { timeoutMs: IDLE_TTL_SEC * 1000 + 2_000, everyMs: 100 });
  expect(await store.loadTurn(id)).toBeNull();
});

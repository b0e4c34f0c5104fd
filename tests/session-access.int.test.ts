// A message's access check on a session the gateway has already seen (issue 9): the session's workspace never
// changes, so the engine answers it from memory and the message's path to its turn loses the read before the
// startTurn script. Counted per connection (commandsOf: the server's MONITOR, the engine's calls and the commands
// their scripts ran, as INFO commandstats counts them), so nothing else on the server can move the figures; and the
// refusals stay what they were.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { commandsOf, startTestRedis, type TestRedis } from '@cadre/testing';
import { SessionEngine, SessionQueue, turnJobId } from '@cadre/session';
import { AGENT_QUEUE, EventFanout, KeyBuilder, SessionStore } from '@cadre/store';

let server: TestRedis;
let redis: Redis;
let subscriber: Redis;
let admin: Redis;
let queue: SessionQueue;
const keys = new KeyBuilder(`access${process.pid}`);

beforeAll(async () => {
  server = await startTestRedis();
  redis = new Redis(server.url);
  subscriber = new Redis(server.url);
  admin = new Redis(server.url);
  queue = new SessionQueue({ connection: redis, keys, onError: () => undefined });
});
afterAll(async () => {
  await queue?.close();
  redis?.disconnect();
  subscriber?.disconnect();
  admin?.disconnect();
  await server?.stop();
});

/** An engine as a gateway starts it: nothing remembered yet. */
const newEngine = (): SessionEngine =>
  new SessionEngine({ store: new SessionStore({ redis, keys }), queue, fanout: new EventFanout({ keys, subscriber }), defaultModel: 'cadre-scripted' });

const total = (counts: Record<string, number>): number => Object.values(counts).reduce((a, b) => a + b, 0);

const A = { workspaces: 'ws-a' } as const;
const B = { workspaces: 'ws-b' } as const;

describe('a message to a session the engine has seen', () => {
  it('starts its turn without reading the session first: one command fewer than on an engine that never saw it', async () => {
    const creator = newEngine();
    // Once before counting: the store's first call on a server is an FCALL refused (no library yet), then its load.
    await creator.sendMessage(A, (await creator.create(A, { workspace_id: 'ws-a' })).session_id, { content: 'warm-up' });
    const seen = (await creator.create(A, { workspace_id: 'ws-a' })).session_id;
    const unseen = (await creator.create(A, { workspace_id: 'ws-a' })).session_id;
    const warm = await commandsOf(admin, redis, () => creator.sendMessage(A, seen, { content: 'hello', message_id: 'm1' }));
    // Another gateway: it has not seen `unseen`, so it reads its workspace (HMGET of the session's meta) first.
    const cold = await commandsOf(admin, redis, () => newEngine().sendMessage(A, unseen, { content: 'hello', message_id: 'm1' }));
    expect(total(warm)).toBe(total(cold) - 1);
    expect(warm.hmget ?? 0).toBe((cold.hmget ?? 0) - 1);
    // Both turns started: their user_message is in the log and their job is in the queue.
    for (const id of [seen, unseen]) {
      expect(await redis.hget(keys.session(id).meta, 'status')).toBe('running');
      expect(await redis.exists(keys.bullJob(AGENT_QUEUE, turnJobId(id, 1)))).toBe(1);
    }
  });

  it('a key of another workspace is still told not_found, and nothing is written; a turn in progress is refused in band', async () => {
    const engine = newEngine();
    const id = (await engine.create(A, { workspace_id: 'ws-a' })).session_id;
    await engine.sendMessage(A, id, { content: 'first', message_id: 'm1' });
    const logLength = await redis.xlen(keys.session(id).events);
    for (const step of [
      () => engine.sendMessage(B, id, { content: 'not yours' }),
      () => engine.queueInput(B, id, 'follow_up', { content: 'not yours' }),
      () => engine.abort(B, id, { content: 'not yours' }),
      () => engine.submitToolResult(B, id, { tool_call_id: 'c1', success: true, result: 'x' }),
      () => engine.registerTools(B, id, { tools: [] }),
      () => engine.cancelTurn(B, id, 'not yours'),
    ]) {
      await expect(step()).rejects.toMatchObject({ code: 'not_found', message: `session ${id} not found` });
    }
    expect(await redis.xlen(keys.session(id).events)).toBe(logLength);
    expect(await redis.zcard(keys.sessionsEnqueueing())).toBe(0);
    expect(await redis.hget(keys.session(id).meta, 'message_id')).toBe('m1');
    await expect(engine.sendMessage(A, id, { content: 'second', message_id: 'm2' })).rejects.toMatchObject({ code: 'turn_in_progress' });
  });

  it('a session that is gone since the engine saw it is not_found, and leaves no enqueue mark', async () => {
    const engine = newEngine();
    const id = (await engine.create(A, { workspace_id: 'ws-a' })).session_id;
    // What its expiry leaves: none of its keys.
    await redis.del(...Object.values(keys.session(id)));
    await expect(engine.sendMessage(A, id, { content: 'hello?' })).rejects.toMatchObject({ code: 'not_found' });
    expect(await redis.zcard(keys.sessionsEnqueueing())).toBe(0);
    expect(await redis.exists(keys.session(id).meta)).toBe(0);
  });
});

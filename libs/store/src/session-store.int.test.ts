import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestRedis, waitUntil, type TestRedis, type TestRedisClient } from '@cadre/testing';
import { KeyBuilder } from './keys.ts';
import { ApprovalStore } from './approval-store.ts';
import { SessionStore } from './session-store.ts';
import type { ClientCall } from './session-types.ts';

let server: TestRedis;
let redis: TestRedisClient;
const keys = new KeyBuilder(`sess${process.pid}`);
const IDLE_TTL_SEC = 600;
const RETENTION_SEC = 3600;
let store: SessionStore;

beforeAll(async () => {
  server = await startTestRedis();
  redis = server.connect();
  store = new SessionStore({ redis, keys, idleTtlSec: IDLE_TTL_SEC, retentionSec: RETENTION_SEC });
});
afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
});

/** Every key a session can have, by its name in keys.ts. */
const sessionKeys = (sessionId: string): Record<string, string> => ({ ...keys.session(sessionId) });

/** When each key of the session that exists expires (PEXPIRETIME, ms), by name. */
async function expiries(sessionId: string): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const [name, key] of Object.entries(sessionKeys(sessionId))) {
    const at = await redis.pexpiretime(key);
    if (at !== -2) out[name] = at;
  }
  return out;
}

/** Every key present expires at the meta hash's millisecond; returns that time. */
async function expireTogether(sessionId: string, present: string[]): Promise<number> {
  const at = await expiries(sessionId);
  expect(Object.keys(at).sort()).toEqual([...present].sort());
  expect(at).toEqual(Object.fromEntries(present.map((name) => [name, at.meta])));
  return at.meta!;
}

/** Redis's clock (TIME), in ms: what the scripts count expiries from. */
async function redisNow(): Promise<number> {
  const [seconds, micros] = await redis.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

/** Waits until Redis's clock has moved past this millisecond, so a later expiry set "ttl from now" is a later one. */
async function clockMovesOn(): Promise<void> {
  const then = await redisNow();
  await waitUntil('Redis\'s clock to move on', async () => (await redisNow()) > then, { everyMs: 1 });
}

const newSession = () => store.createSession({
  workspace_id: 'ws-ttl', model: 'm', tools: [], transcript: [], project_context: [], system_context: '', max_context_tokens: 1000, approval_policy: [], stop_on_denial: false,
});

/** A client tool call the turn waits on for an hour (a park keeps the session until past that deadline). */
const clientCall = (id: string): ClientCall => ({
  tool_call_id: id, tool_name: 'lookup', arguments: '{}', order: 0, timeout_ms: 3_600_000, deadline_ms: Date.now() + 3_600_000, status: 'pending',
});

/** A builtin call that waits a minute for an approval (the session's `calculate`). */
const askingCall = (id: string): ClientCall => {
  const now = Date.now();
  return {
    tool_call_id: id, tool_name: 'calculate', arguments: '{"expression":"1+1"}', order: 0, timeout_ms: 0, deadline_ms: 0, status: 'pending', builtin: true,
    approval: { approval_id: `s.${id}`, status: 'pending', reason: 'ask', timeout_secs: 60, created_at: now, expires_at: now + 60_000 },
  };
};

/** A session whose turn has parked on a builtin call's pending approval (`call-1`, approval `s.call-1`). */
async function parkedOnApproval(): Promise<string> {
  const { session_id: id } = await newSession();
  const wake = await store.startTurn(id, { message_id: 'm1', content: 'sum' });
  await store.claimTurn(id, wake, 'lease-1', 'host');
  await store.commitTurn(id, 'lease-1', { calls: [askingCall('call-1')] });
  expect(await store.parkTurn(id, 'lease-1')).toBe(true);
  return id;
}

describe('session keys\' expiry', () => {
  it('every key of a session expires together through the steps a client takes: queued inputs, a park, an early end, the next turns, the close', async () => {
    const { session_id: id } = await newSession();
    await expireTogether(id, ['meta', 'events']);

    // Turn 1 runs and records a client call; follow-ups and a steer are queued while it runs.
    const wake1 = await store.startTurn(id, { message_id: 'm1', content: 'first' });
    expect((await store.claimTurn(id, wake1, 'lease-1', 'host')).kind).toBe('taken');
    await clockMovesOn();
    await store.commitTurn(id, 'lease-1', { calls: [clientCall('call-1')] });
    await clockMovesOn();
    for (const input of ['f1', 'f2', 'f3']) await store.queueInput(id, 'follow_up', { input_id: input, content: input }, 10);
    await store.queueInput(id, 'steer', { input_id: 's1', content: 'steer' }, 10);
    const started1 = await expireTogether(id, ['meta', 'events', 'transcript', 'calls', 'steer', 'followUp']);

    // It parks on the call: every key is kept until the idle TTL past the call's deadline, an hour on.
    expect(await store.parkTurn(id, 'lease-1')).toBe(true);
    const parked = await expireTogether(id, ['meta', 'events', 'transcript', 'calls', 'steer', 'followUp']);
    expect(parked).toBeGreaterThan(started1 + 3_000_000);

    // The client cancels: the turn ends early, the steer meant for it is dropped and the first follow-up starts
    // turn 2 in the same step, which gives every key the idle TTL from now, the queue too, shorter than the park's.
    await clockMovesOn();
    const { wake: wake2 } = (await store.cancelTurn(id, 'cancelled'))!;
    expect(wake2).toBe(wake1 + 1);
    const started2 = await expireTogether(id, ['meta', 'events', 'transcript', 'followUp']);
    expect(started2).toBeLessThan(parked);
    expect(started2).toBeGreaterThan(started1);

    // Turn 2 takes a steer and ends: the second follow-up starts turn 3, the third stays queued with the rest.
    expect((await store.claimTurn(id, wake2, 'lease-2', 'host')).kind).toBe('taken');
    await store.queueInput(id, 'steer', { input_id: 's2', content: 'steer' }, 10);
    expect(await store.deliverSteering(id, 'lease-2')).toBe(1);
    await clockMovesOn();
    expect(await store.finishTurn(id, 'lease-2', {}, 'end_turn')).toMatchObject({ kind: 'ended', next: wake2 + 1 });
    expect((await store.getSession(id))!.queued_follow_ups.map((f) => f.input_id)).toEqual(['f3']);
    const started3 = await expireTogether(id, ['meta', 'events', 'transcript', 'followUp']);
    expect(started3).toBeGreaterThan(started2);

    // The close drops the queue; what is left is kept for the retention period, all of it together.
    await store.closeSession(id, 'done');
    const closed = await expireTogether(id, ['meta', 'events', 'transcript']);
    expect(closed).toBeGreaterThan(started3);
  });

  it('a running turn keeps its session alive: every key gets the idle TTL from now, a park\'s later expiry stays, a closed or deleted session is left as it is', async () => {
    const { session_id: id } = await newSession();
    const wake1 = await store.startTurn(id, { message_id: 'm1', content: 'long' });
    await store.claimTurn(id, wake1, 'lease-1', 'host');
    await store.queueInput(id, 'follow_up', { input_id: 'f1', content: 'later' }, 10);
    const present = ['meta', 'events', 'transcript', 'followUp'];
    const started = await expireTogether(id, present);
    expect((await store.loadTurn(id))!.alive_from).toBe(started - IDLE_TTL_SEC * 1000);

    // Kept alive: every key the idle TTL from now, and the turn's next steps count from then.
    await clockMovesOn();
    await store.keepSessionAlive(id, 'lease-1');
    const kept = await expireTogether(id, present);
    expect(kept).toBeGreaterThan(started);
    expect((await store.loadTurn(id))!.alive_from).toBe(kept - IDLE_TTL_SEC * 1000);
    await expect(store.keepSessionAlive(id, 'lease-0')).rejects.toMatchObject({ code: 'lease_lost' });

    // Parked on an hour-long call, then resumed: keeping it alive never shortens the park's expiry.
    await store.commitTurn(id, 'lease-1', { calls: [clientCall('call-1')] });
    expect(await store.parkTurn(id, 'lease-1')).toBe(true);
    const parked = await expireTogether(id, [...present, 'calls']);
    const wake = await store.resolveToolCall(id, { tool_call_id: 'call-1', success: true, result: 'ok' });
    await store.claimTurn(id, wake, 'lease-2', 'host');
    await clockMovesOn();
    await store.keepSessionAlive(id, 'lease-2');
    expect(await expireTogether(id, [...present, 'calls'])).toBe(parked);

    // Closed: the retention stays (the turn ended, so the lease holds nothing). Deleted: nothing comes back.
    await store.closeSession(id, 'done');
    const closed = await expireTogether(id, ['meta', 'events', 'transcript', 'calls']);
    await expect(store.keepSessionAlive(id, 'lease-2')).rejects.toMatchObject({ code: 'lease_lost' });
    expect(await expireTogether(id, ['meta', 'events', 'transcript', 'calls'])).toBe(closed);
    await redis.del(...Object.values(sessionKeys(id)));
    await expect(store.keepSessionAlive(id, 'lease-2')).rejects.toMatchObject({ code: 'session_not_found' });
    expect(await expiries(id)).toEqual({});
  });

  it('a session-scope grant expires with its session, never after it: decided while parked, then the next turn, then the close', async () => {
    // Parked on the approval: the session is kept the idle TTL past its deadline (a minute on), not the retention.
    const id = await parkedOnApproval();
    const parked = await expireTogether(id, ['meta', 'events', 'transcript', 'calls']);

    // Approved for the rest of the session: the grant expires with the session's keys, though the retention is longer.
    const { wake } = await store.decideApproval(id, 'call-1', 'approved', '', 'tester', 'session');
    expect(await store.granted(id, [{ tool: 'calculate', arguments: '{"expression":"1+1"}' }])).toEqual([true]);
    expect(await expireTogether(id, ['meta', 'events', 'transcript', 'calls', 'grants'])).toBe(parked);

    // The turn ends; the next one's start gives every key, the grant too, the idle TTL from then.
    await store.claimTurn(id, wake, 'lease-2', 'host');
    expect(await store.finishTurn(id, 'lease-2', {}, 'end_turn')).toEqual({ kind: 'ended', next: 0 });
    await clockMovesOn();
    await store.startTurn(id, { message_id: 'm2', content: 'again' });
    const started = await expireTogether(id, ['meta', 'events', 'transcript', 'approvals', 'grants']);
    expect(started).toBeLessThan(parked);

    // Closed: the retention period for every key, the grant's and the earlier turn's approval record's included.
    await store.closeSession(id, 'done');
    expect(await expireTogether(id, ['meta', 'events', 'transcript', 'approvals', 'grants'])).toBeGreaterThan(started);
  });

  it('abort_and_prompt after a session-scope approval: the prompt\'s turn gives every key, the approval record and the grant too, the idle TTL from then', async () => {
    const id = await parkedOnApproval();
    await store.decideApproval(id, 'call-1', 'approved', '', 'tester', 'session');
    const parked = await expireTogether(id, ['meta', 'events', 'transcript', 'calls', 'grants']);

    // Aborted with a prompt before the continuation ran: the call's approval moves to the earlier turns' records, and
    // the new turn's start sets every key, not only the four a session is created with.
    await clockMovesOn();
    expect((await store.abortTurn(id, { message_id: 'm2', content: 'instead' })).wake).toBeGreaterThan(0);
    const started = await expireTogether(id, ['meta', 'events', 'transcript', 'approvals', 'grants']);
    expect(started).toBeLessThan(parked);
  });

  it('a key written to a session whose meta hash has no expiry gets the session\'s idle TTL from then, never none', async () => {
    const { session_id: id } = await newSession();
    await store.startTurn(id, { message_id: 'm1', content: 'first' });
    await redis.persist(keys.session(id).meta);
    const before = await redisNow();
    await store.queueInput(id, 'follow_up', { input_id: 'f1', content: 'later' }, 10);
    const after = await redisNow();
    const at = await redis.pexpiretime(keys.session(id).followUp);
    expect(at).toBeGreaterThanOrEqual(before + IDLE_TTL_SEC * 1000);
    expect(at).toBeLessThanOrEqual(after + IDLE_TTL_SEC * 1000);
  });
});

describe('a session\'s pending approvals in its workspace\'s pending index', () => {
  it('are indexed before the script that asks them, so a lost announcement loses none; a refused commit leaves none; the index expires', async () => {
    const approvals = new ApprovalStore({ redis, keys });
    // The process dies right after each of its scripts: no announcement ever reaches the inbox.
    const silent = new SessionStore({
      redis, keys, idleTtlSec: IDLE_TTL_SEC, retentionSec: RETENTION_SEC,
      inbox: { announce: async () => {}, indexPending: (ws, op, records) => approvals.indexPending(ws, op, records), inboxFailed: (err) => { throw err; } },
    });
    const { session_id: id } = await silent.createSession({
      workspace_id: 'ws-index', model: 'm', tools: [], transcript: [], project_context: [], system_context: '', max_context_tokens: 1000, approval_policy: [], stop_on_denial: false,
    });
    const wake = await silent.startTurn(id, { message_id: 'm1', content: 'sum' });
    await silent.claimTurn(id, wake, 'lease-1', 'host');

    const refused = askingCall('call-refused');
    await expect(silent.commitTurn(id, 'lease-lost', { calls: [refused] })).rejects.toMatchObject({ code: 'lease_lost' });
    expect(await approvals.pendingIds('ws-index', 'session')).toEqual([]);

    const asked = askingCall('call-asked');
    await silent.commitTurn(id, 'lease-1', { calls: [asked] });
    expect(await approvals.pendingIds('ws-index', 'session')).toEqual([asked.approval!.approval_id]);
    expect(await approvals.pendingIds('ws-other', 'session')).toEqual([]);
    // Kept a day past the deadline (then the listing has long stopped showing it), never for ever.
    const expiresAt = await redis.pexpiretime(keys.approvalsPending('ws-index').session);
    expect(expiresAt).toBe(asked.approval!.expires_at + 86_400_000);
  });
});

import * as grpc from '@grpc/grpc-js';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertContiguous, grpcClient, httpClient, waitUntil } from '@cadre/testing';
import { AGENT_QUEUE, KeyBuilder } from '@cadre/store';
import type { AgentServiceClient } from '@cadre/protocol';
import { TestStack } from './support/stack.ts';
import { SessionStream, isCase, sessionEvents, sessionEventsWhen } from './support/session-client.ts';

// Session approvals: a tool call an `ask` rule matches parks the turn (no worker slot) until it is decided, from
// roz's PermissionDecision or the approvals HTTP API; the decision resumes the turn at its tool calls.
const OTHER_KEY = 'key-other-workspace-0123456789';
let stack: TestStack;
let client: AgentServiceClient;
let redis: Redis;
let queue: Queue;

beforeAll(async () => {
  stack = await TestStack.start({ gateways: 2, workers: 0, env: { CADRE_API_KEYS: `other:${OTHER_KEY}` } });
  client = grpcClient(stack.grpcTarget);
  redis = new Redis(stack.redis.url);
  queue = new Queue(AGENT_QUEUE, { connection: redis, prefix: new KeyBuilder(stack.prefix).bullPrefix() });
});
afterAll(async () => {
  client?.close();
  await queue?.close();
  redis?.disconnect();
  await stack?.stop();
});

interface Ev {
  seq: number;
  event_type: string;
  payload: Record<string, any>;
}
interface Approval {
  approval_id: string;
  session_id: string;
  status: string;
  tool_name: string;
  call_id: string;
  arguments: string;
  decided_by?: string;
  decision_reason?: string;
}

const api = () => httpClient(stack.url);
const second = () => httpClient(`http://127.0.0.1:${stack.gateways[1]!.port}`);

const events = (sessionId: string): Promise<Ev[]> => sessionEvents<Ev>(stack.url, sessionId);

const eventsUntil = (sessionId: string, pred: (e: Ev) => boolean): Promise<Ev[]> => sessionEventsWhen<Ev>(stack.url, sessionId, (all) => all.some(pred));

/** Parked: the session waits and no job is active (a pending approval holds no worker slot). */
async function parkedWithNoActiveJob(sessionId: string): Promise<void> {
  await waitUntil('the session to wait on its tool', async () => (await api().get<{ session: { status: string } }>(`/api/sessions/${sessionId}`)).body.session.status === 'waiting_tool');
  await waitUntil('no active job', async () => (await queue.getActiveCount()) === 0);
}

async function httpSession(rules: object[], workspace = 'sess-appr'): Promise<string> {
  const created = await api().post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: workspace, approval_policy: { rules } });
  expect(created.status).toBe(201);
  return created.body.session.session_id;
}

const CALC = (expr: string) => `[[scripted:call=calculate({"expression":"${expr}"})]]`;
const text = (evs: Ev[], fromSeq = 0): string => evs.filter((e) => e.event_type === 'text_delta' && e.seq > fromSeq).map((e) => e.payload.content).join('');

/** A session whose turn asked before calculate(`expr`) and is parked on it. */
async function parkedOnAsk(expr: string): Promise<{ sessionId: string; asked: Ev }> {
  const sessionId = await httpSession([{ tool: 'calculate', action: 'ask', timeout_secs: 120 }]);
  await api().post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${CALC(expr)}` });
  const asked = (await eventsUntil(sessionId, (e) => e.event_type === 'approval_requested')).find((e) => e.event_type === 'approval_requested')!;
  await parkedWithNoActiveJob(sessionId);
  return { sessionId, asked };
}

describe('session approvals', () => {
  it('roz StreamSession: ActivityUpdate("waiting_approval") then PermissionDecision runs the tool without re-running the model call', async () => {
    const pool = await stack.addWorkerPool();
    try {
      const put = await api().request('PUT', '/api/workspaces/roz-appr/approval-policy', { rules: [{ tool: 'calc*', action: 'ask', reason: 'check the maths', timeout_secs: 120 }] });
      expect(put.status).toBe(200);
      const s = new SessionStream(client);
      s.send({ $case: 'start', value: { environmentId: 'roz-appr' } });
      const sessionId = ((await s.waitForCase('sessionStarted')).response!.value as { sessionId: string }).sessionId;
      const callsBefore = stack.model.requestCount();
      s.send({ $case: 'userMessage', value: { content: `What is 6*7? ${CALC('6*7')}`, messageId: 'm1' } });
      const waiting = await s.waitFor((f) => f.response?.$case === 'activityUpdate' && (f.response.value as { state: string }).state === 'waiting_approval');
      const approvalId = (waiting.response!.value as { detail: string }).detail;
      expect(approvalId).toMatch(new RegExp(`^s\\.${sessionId}\\.[0-9a-f]{12}$`));
      await parkedWithNoActiveJob(sessionId);
      // The tool has not run: no tool_result yet, one model call so far.
      expect((await events(sessionId)).some((e) => e.event_type === 'tool_result')).toBe(false);
      expect(stack.model.requestCount() - callsBefore).toBe(1);

      s.send({ $case: 'permissionDecision', value: { approvalId, approved: true } });
      const done = await s.waitForCase('turnComplete');
      expect((done.response!.value as { stopReason: string }).stopReason).toBe('end_turn');
      expect(s.of('textDelta').map((d) => d.content).join('')).toContain('using 1 tool result(s): 42');
      // Two model calls in all: the one before the approval was not repeated.
      expect(stack.model.requestCount() - callsBefore).toBe(2);
      const log = await events(sessionId);
      assertContiguous(log.map((e) => e.seq));
      const types = log.map((e) => e.event_type);
      expect(types.indexOf('approval_requested')).toBeLessThan(types.indexOf('approval_resolved'));
      expect(types.indexOf('approval_resolved')).toBeLessThan(types.indexOf('tool_call'));
      expect(types.indexOf('tool_call')).toBeLessThan(types.indexOf('tool_result'));
      expect(log.find((e) => e.event_type === 'approval_resolved')!.payload).toMatchObject({ approval_id: approvalId, approved: true, status: 'approved', decided_by: 'operator-key' });

      // A second decision: refused in band (conflict), the stream stays open.
      s.send({ $case: 'permissionDecision', value: { approvalId, approved: false } });
      const err = await s.waitFor(isCase('error'), 5000, s.frames.indexOf(done));
      expect(err.response!.value).toMatchObject({ code: 'conflict', message: expect.stringContaining('already approved') });
      s.end();
      expect((await s.status).code).toBe(grpc.status.OK);
    } finally {
      await pool.close(0);
      stack.pools.splice(stack.pools.indexOf(pool), 1);
    }
  });

  it('roz PermissionDecision carries a modifier: a refused one is an in-band invalid_argument, an accepted one runs', async () => {
    const pool = await stack.addWorkerPool();
    try {
      const s = new SessionStream(client);
      s.send({ $case: 'start', value: { environmentId: 'roz-mod', approvalPolicy: { rules: [{ tool: 'calculate', when: {}, action: 'ask' }] } } });
      await s.waitForCase('sessionStarted');
      s.send({ $case: 'userMessage', value: { content: `Sum ${CALC('1+1')}`, messageId: 'm1' } });
      const waiting = await s.waitFor((f) => f.response?.$case === 'activityUpdate' && (f.response.value as { state: string }).state === 'waiting_approval');
      const approvalId = (waiting.response!.value as { detail: string }).detail;
      s.send({ $case: 'permissionDecision', value: { approvalId, approved: true, modifier: { expression: 7 } } });
      const err = await s.waitFor(isCase('error'), 5000, s.frames.indexOf(waiting));
      expect(err.response!.value).toMatchObject({ code: 'invalid_argument', message: expect.stringContaining("modifier does not fit calculate's arguments") });
      s.send({ $case: 'permissionDecision', value: { approvalId, approved: true, modifier: { expression: '5*5' } } });
      await s.waitForCase('turnComplete');
      expect(s.of('textDelta').map((d) => d.content).join('')).toContain('25');
      s.cancel();
    } finally {
      await pool.close(0);
      stack.pools.splice(stack.pools.indexOf(pool), 1);
    }
  });

  it('roz StreamSession carries its own rules (StartSession.approval_policy): its calls ask or are denied as they say in a workspace with no policy; a bad rule is INVALID_ARGUMENT and opens nothing', async () => {
    const pool = await stack.addWorkerPool();
    try {
      // Workspace roz-own has no policy: without the session's rules calculate would run unasked.
      const rules = [
        { tool: 'calculate', when: { expression: { match: { $case: 'glob' as const, value: '6*?' } } }, action: 'ask', reason: 'the session asks', timeoutSecs: 120 },
        { tool: 'calc*', when: {}, action: 'deny', reason: 'no other sums' },
      ];
      const s = new SessionStream(client);
      s.send({ $case: 'start', value: { environmentId: 'roz-own', approvalPolicy: { rules } } });
      const sessionId = ((await s.waitForCase('sessionStarted')).response!.value as { sessionId: string }).sessionId;
      s.send({ $case: 'userMessage', value: { content: `Two sums [[scripted:parallel]] ${CALC('6*7')} ${CALC('1+1')}`, messageId: 'm1' } });
      const waiting = await s.waitFor((f) => f.response?.$case === 'activityUpdate' && (f.response.value as { state: string }).state === 'waiting_approval');
      const approvalId = (waiting.response!.value as { detail: string }).detail;
      const record = (await api().get<{ approval: Approval & { reason: string } }>(`/api/approvals/${approvalId}`)).body.approval;
      expect(record).toMatchObject({ session_id: sessionId, tool_name: 'calculate', arguments: '{"expression":"6*7"}', reason: 'the session asks' });
      s.send({ $case: 'permissionDecision', value: { approvalId, approved: true } });
      await s.waitForCase('turnComplete');
      const log = await events(sessionId);
      expect(log.filter((e) => e.event_type === 'tool_result').map((e) => [e.payload.success, e.payload.result])).toEqual(expect.arrayContaining([[false, 'denied: no other sums'], [true, '42']]));
      s.cancel();

      const sessionKeys = async () => (await redis.keys(`${stack.prefix}:{s:*`)).length;
      const before = await sessionKeys();
      for (const bad of [{ tool: 'calculate', when: {}, action: 'maybe' }, { tool: 'calculate', when: { expression: { match: undefined } }, action: 'ask' }]) {
        const refused = new SessionStream(client);
        refused.send({ $case: 'start', value: { environmentId: 'roz-own', approvalPolicy: { rules: [bad] } } });
        const status = await refused.status;
        expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
        expect(status.details).toMatch(/approval_policy\.rules\[0\]\.(action must be one of|when\.expression must have exactly one of)/);
      }
      expect(await sessionKeys()).toBe(before);
    } finally {
      await pool.close(0);
      stack.pools.splice(stack.pools.indexOf(pool), 1);
    }
  });

  it('several calls of one turn each get a record; all are decided (over HTTP, on another gateway) before the turn goes on', async () => {
    const pool = await stack.addWorkerPool();
    try {
      const sessionId = await httpSession([{ tool: 'calculate', action: 'ask', timeout_secs: 120 }]);
      await api().post(`/api/sessions/${sessionId}/messages`, { content: `Two sums [[scripted:parallel]] ${CALC('1+1')} ${CALC('2+3')}` });
      const asked = (await eventsUntil(sessionId, (e) => e.event_type === 'approval_requested' && e.payload.index === 2)).filter((e) => e.event_type === 'approval_requested');
      expect(asked.map((e) => [e.payload.index, e.payload.count, e.payload.arguments])).toEqual([[1, 2, '{"expression":"1+1"}'], [2, 2, '{"expression":"2+3"}']]);
      await parkedWithNoActiveJob(sessionId);

      const inbox = await second().get<{ approvals: Approval[] }>(`/api/approvals?workspace_id=sess-appr&session_id=${sessionId}&status=pending`);
      expect(inbox.status).toBe(200);
      expect(inbox.body.approvals.map((a) => a.approval_id)).toEqual(asked.map((e) => e.payload.approval_id));
      expect(inbox.body.approvals[0]).toMatchObject({ session_id: sessionId, tool_name: 'calculate', status: 'pending' });

      const first = await second().post<{ approval: Approval }>(`/api/approvals/${asked[0]!.payload.approval_id}/decision`, { approved: true });
      expect(first.status).toBe(200);
      expect(first.body.approval).toMatchObject({ status: 'approved', decided_by: 'operator-key' });
      // One of two decided: the turn still waits, nothing ran.
      await parkedWithNoActiveJob(sessionId);
      expect((await events(sessionId)).some((e) => e.event_type === 'tool_call' || e.event_type === 'tool_result')).toBe(false);

      const denied = await second().post<{ approval: Approval }>(`/api/approvals/${asked[1]!.payload.approval_id}/decision`, { approved: false, reason: 'not that one' });
      expect(denied.body.approval).toMatchObject({ status: 'denied', decision_reason: 'not that one' });
      const log = await eventsUntil(sessionId, (e) => e.event_type === 'turn_complete');
      const results = log.filter((e) => e.event_type === 'tool_result').map((e) => [e.payload.tool_call_id, e.payload.success, e.payload.result]);
      expect(results).toEqual(expect.arrayContaining([[asked[1]!.payload.tool_call_id, false, 'denied: not that one'], [asked[0]!.payload.tool_call_id, true, '2']]));
      // The model saw both: the result and the denial as a tool error.
      expect(text(log)).toContain('using 2 tool result(s): 2; error: denied: not that one');
      expect((await second().get(`/api/approvals/${asked[0]!.payload.approval_id}`)).body).toMatchObject({ approval: { status: 'approved' } });
      expect((await second().post(`/api/approvals/${asked[1]!.payload.approval_id}/decision`, { approved: true })).status).toBe(409);
    } finally {
      await pool.close(0);
      stack.pools.splice(stack.pools.indexOf(pool), 1);
    }
  });

  it('a modifier amends the asked call: a builtin runs with it, a client tool\'s ToolRequest carries it; one the schema refuses is 400', async () => {
    const pool = await stack.addWorkerPool();
    try {
      // A builtin (server) tool: the model asked 1+1, the approver lets 6*7 run.
      const { sessionId, asked } = await parkedOnAsk('1+1');
      const decide = (id: string, body: object) => second().post<{ approval: Approval & { modifier?: string }; error?: { message: string } }>(`/api/approvals/${id}/decision`, body);
      const wrongType = await decide(asked.payload.approval_id, { approved: true, modifier: { expression: 42 } });
      expect(wrongType.status).toBe(400);
      expect(wrongType.body.error!.message).toContain("modifier does not fit calculate's arguments: /expression must be string");
      expect((await decide(asked.payload.approval_id, { approved: true, modifier: { expression: '6*7', extra: 1 } })).status).toBe(400);
      // Refused means nothing written: still pending, nothing ran.
      expect((await api().get<{ approval: Approval }>(`/api/approvals/${asked.payload.approval_id}`)).body.approval.status).toBe('pending');
      const ok = await decide(asked.payload.approval_id, { approved: true, modifier: { expression: '6*7' } });
      expect(ok.status).toBe(200);
      expect(ok.body.approval).toMatchObject({ status: 'approved', arguments: '{"expression":"1+1"}', modifier: '{"expression":"6*7"}' });
      const log = await eventsUntil(sessionId, (e) => e.event_type === 'turn_complete');
      expect(log.find((e) => e.event_type === 'approval_resolved')!.payload).toMatchObject({ approved: true, modifier: '{"expression":"6*7"}' });
      expect(log.find((e) => e.event_type === 'tool_call')!.payload.arguments).toBe('{"expression":"6*7"}');
      expect(log.find((e) => e.event_type === 'tool_result')!.payload).toMatchObject({ success: true, result: '42' });

      // A client tool: its schema is the session's; the ToolRequest the client gets carries the amended parameters.
      const created = await api().post<{ session: { session_id: string } }>('/api/sessions', {
        workspace_id: 'sess-appr',
        tools: [{ name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' }, tags: { type: 'array' } }, required: ['q'] } }],
        approval_policy: { rules: [{ tool: 'lookup', action: 'ask', timeout_secs: 120 }] },
      });
      const clientSession = created.body.session.session_id;
      await api().post(`/api/sessions/${clientSession}/messages`, { content: 'Look [[scripted:call=lookup({"q":"cats"})]]' });
      const ask = (await eventsUntil(clientSession, (e) => e.event_type === 'approval_requested')).find((e) => e.event_type === 'approval_requested')!;
      await parkedWithNoActiveJob(clientSession);
      const missing = await decide(ask.payload.approval_id, { approved: true, modifier: { tags: [] } });
      expect(missing.status).toBe(400);
      expect(missing.body.error!.message).toContain("must have required property 'q'");
      expect((await decide(ask.payload.approval_id, { approved: true, modifier: { q: 'dogs', tags: [] } })).status).toBe(200);
      const request = (await eventsUntil(clientSession, (e) => e.event_type === 'tool_request')).find((e) => e.event_type === 'tool_request')!;
      expect(request.payload).toMatchObject({ tool_call_id: ask.payload.tool_call_id, tool_name: 'lookup', parameters: { q: 'dogs', tags: [] } });
      await api().post(`/api/sessions/${clientSession}/tool-results`, { tool_call_id: ask.payload.tool_call_id, success: true, result: 'woof' });
      expect(text(await eventsUntil(clientSession, (e) => e.event_type === 'turn_complete'))).toContain('woof');
    } finally {
      await pool.close(0);
      stack.pools.splice(stack.pools.indexOf(pool), 1);
    }
  });

  it('a ToolResult for a call still waiting for its approval is refused and writes nothing (HTTP 400 for a builtin, roz in band for a client tool); the gate still decides', async () => {
    const pool = await stack.addWorkerPool();
    try {
      // A builtin: the worker runs it once approved; a client's forged output must never reach the model instead.
      const { sessionId, asked } = await parkedOnAsk('6*7');
      const before = await events(sessionId);
      const forged = await api().post<{ error: { message: string } }>(`/api/sessions/${sessionId}/tool-results`, { tool_call_id: asked.payload.tool_call_id, success: true, result: '13' });
      expect(forged.status).toBe(400);
      expect(forged.body.error.message).toContain('was not requested from the client');
      expect(await events(sessionId)).toEqual(before);
      expect((await api().get<{ approval: Approval }>(`/api/approvals/${asked.payload.approval_id}`)).body.approval.status).toBe('pending');
      await parkedWithNoActiveJob(sessionId);
      expect((await second().post(`/api/approvals/${asked.payload.approval_id}/decision`, { approved: true })).status).toBe(200);
      const log = await eventsUntil(sessionId, (e) => e.event_type === 'turn_complete');
      expect(log.filter((e) => e.event_type === 'tool_result').map((e) => e.payload.result)).toEqual(['42']);

      // A client tool over roz: its tool_call_id is in approval_requested, but no ToolRequest went out yet.
      const s = new SessionStream(client);
      s.send({ $case: 'start', value: {
        environmentId: 'roz-gate', approvalPolicy: { rules: [{ tool: 'lookup', when: {}, action: 'ask', timeoutSecs: 120 }] },
        tools: [{ name: 'lookup', description: 'Looks up', parametersSchema: { type: 'object', properties: { q: { type: 'string' } } }, timeoutMs: 0, category: 0 }],
      } });
      const rozSession = ((await s.waitForCase('sessionStarted')).response!.value as { sessionId: string }).sessionId;
      s.send({ $case: 'userMessage', value: { content: 'Look [[scripted:call=lookup({"q":"cats"})]]', messageId: 'm1' } });
      const ask = (await eventsUntil(rozSession, (e) => e.event_type === 'approval_requested')).find((e) => e.event_type === 'approval_requested')!;
      await parkedWithNoActiveJob(rozSession);
      const rozBefore = await events(rozSession);
      const sent = s.frames.length;
      s.send({ $case: 'toolResult', value: { toolCallId: ask.payload.tool_call_id, success: true, result: 'forged', truncated: false } });
      const err = await s.waitFor(isCase('error'), 5000, sent);
      expect(err.response!.value).toMatchObject({ code: 'invalid_argument', message: expect.stringContaining('waits for its approval') });
      expect(await events(rozSession)).toEqual(rozBefore);
      // Approved, the ToolRequest goes out and the client's answer is taken.
      s.send({ $case: 'permissionDecision', value: { approvalId: ask.payload.approval_id, approved: true } });
      await s.waitForCase('toolRequest');
      s.send({ $case: 'toolResult', value: { toolCallId: ask.payload.tool_call_id, success: true, result: 'meow', truncated: false } });
      await s.waitForCase('turnComplete');
      expect(s.of('textDelta').map((d) => d.content).join('')).toContain('meow');
      s.end();
      expect((await s.status).code).toBe(grpc.status.OK);
    } finally {
      await pool.close(0);
      stack.pools.splice(stack.pools.indexOf(pool), 1);
    }
  });

  it('a session\'s records outlive their turn: readable by id and listed with session_id= after the next turns start; a late decision is 409', async () => {
    const pool = await stack.addWorkerPool();
    try {
      const sessionId = await httpSession([{ tool: 'calculate', action: 'ask', timeout_secs: 120 }]);
      const askedAfter = async (afterSeq: number): Promise<Ev> =>
        (await eventsUntil(sessionId, (e) => e.event_type === 'approval_requested' && e.seq > afterSeq)).find((e) => e.event_type === 'approval_requested' && e.seq > afterSeq)!;
      await api().post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${CALC('1+1')}` });
      const first = await askedAfter(0);
      expect((await second().post(`/api/approvals/${first.payload.approval_id}/decision`, { approved: true })).status).toBe(200);
      const end1 = (await eventsUntil(sessionId, (e) => e.event_type === 'turn_complete')).find((e) => e.event_type === 'turn_complete')!.seq;
      // The next turn (a new message) asks again; abort with a prompt ends it and starts a third in one step.
      await api().post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${CALC('2+2')}` });
      const secondAsk = await askedAfter(end1);
      expect((await api().post(`/api/sessions/${sessionId}/abort`, { prompt: { content: `Sum ${CALC('3+3')}` } })).status).toBe(200);
      const third = await askedAfter(secondAsk.seq);

      const byId = async (id: string) => (await second().get<{ approval: Approval }>(`/api/approvals/${id}`));
      expect((await byId(first.payload.approval_id)).body.approval).toMatchObject({ status: 'approved', arguments: '{"expression":"1+1"}', decided_by: 'operator-key' });
      expect((await byId(secondAsk.payload.approval_id)).body.approval).toMatchObject({ status: 'cancelled', arguments: '{"expression":"2+2"}' });
      const listed = await second().get<{ approvals: Approval[] }>(`/api/approvals?workspace_id=sess-appr&session_id=${sessionId}`);
      expect(listed.body.approvals.map((a) => [a.approval_id, a.status])).toEqual([
        [first.payload.approval_id, 'approved'], [secondAsk.payload.approval_id, 'cancelled'], [third.payload.approval_id, 'pending'],
      ]);
      expect((await second().get<{ approvals: Approval[] }>(`/api/approvals?workspace_id=sess-appr&session_id=${sessionId}&status=approved`)).body.approvals.map((a) => a.approval_id)).toEqual([first.payload.approval_id]);
      const late = await second().post<{ error: { message: string } }>(`/api/approvals/${first.payload.approval_id}/decision`, { approved: false });
      expect(late.status).toBe(409);
      expect(late.body.error.message).toContain('already approved');
      // Another workspace's key still sees none of them.
      expect((await httpClient(stack.url, OTHER_KEY).get(`/api/approvals/${first.payload.approval_id}`)).status).toBe(404);
      await api().request('DELETE', `/api/sessions/${sessionId}`, {});
      expect((await byId(first.payload.approval_id)).body.approval.status).toBe('approved');
    } finally {
      await pool.close(0);
      stack.pools.splice(stack.pools.indexOf(pool), 1);
    }
  });

  it('a session\'s pending approval is in its workspace\'s inbox listing, is decided by the listed id (one and in bulk by filter), then leaves it; another workspace never sees it', async () => {
    const pool = await stack.addWorkerPool();
    try {
      const ws = 'sess-inbox';
      const pendingIn = async (workspace: string, via = api(), status = 'pending'): Promise<Approval[]> => {
        const res = await via.get<{ approvals: Approval[] }>(`/api/approvals?workspace_id=${workspace}${status ? `&status=${status}` : ''}`);
        expect(res.status).toBe(200);
        return res.body.approvals;
      };
      const sessionId = await httpSession([{ tool: 'calculate', action: 'ask', timeout_secs: 120 }], ws);
      await api().post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${CALC('5+5')}` });
      const asked = (await eventsUntil(sessionId, (e) => e.event_type === 'approval_requested')).find((e) => e.event_type === 'approval_requested')!;
      await parkedWithNoActiveJob(sessionId);

      // No task or run in the workspace: the workspace's listing finds the session's approval all the same.
      const listed = await pendingIn(ws, second());
      expect(listed).toEqual([expect.objectContaining({
        approval_id: asked.payload.approval_id, session_id: sessionId, workspace_id: ws, call_id: asked.payload.tool_call_id, tool_name: 'calculate', status: 'pending',
      })]);
      expect((await pendingIn(ws, api(), '')).map((a) => a.approval_id)).toEqual([asked.payload.approval_id]);
      const other = httpClient(stack.url, OTHER_KEY);
      expect((await pendingIn('other', other)).map((a) => a.approval_id)).not.toContain(asked.payload.approval_id);
      expect((await other.get(`/api/approvals?workspace_id=${ws}&status=pending`)).status).toBe(403);

      // Decided by the id the listing gave (on the other gateway): it leaves the listing and the turn goes on.
      const decided = await second().post<{ approval: Approval }>(`/api/approvals/${listed[0]!.approval_id}/decision`, { approved: true });
      expect(decided.status).toBe(200);
      expect(await pendingIn(ws)).toEqual([]);
      expect(text(await eventsUntil(sessionId, (e) => e.event_type === 'turn_complete'))).toContain('10');

      // The next turn's ask, decided in bulk by the workspace filter (what `cadre approvals deny --all` sends).
      await api().post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${CALC('6+6')}` });
      const next = (await eventsUntil(sessionId, (e) => e.event_type === 'approval_requested' && e.payload.approval_id !== asked.payload.approval_id))
        .filter((e) => e.event_type === 'approval_requested').at(-1)!;
      await parkedWithNoActiveJob(sessionId);
      expect((await pendingIn(ws)).map((a) => a.approval_id)).toEqual([next.payload.approval_id]);
      const bulk = await api().post<{ results: { approval_id: string; outcome: string; approval?: Approval }[] }>(
        '/api/approvals/decisions', { filter: { workspace_id: ws }, approved: false, reason: 'not now' },
      );
      expect(bulk.status).toBe(200);
      expect(bulk.body.results).toEqual([expect.objectContaining({ approval_id: next.payload.approval_id, outcome: 'decided', approval: expect.objectContaining({ status: 'denied' }) })]);
      expect(await pendingIn(ws)).toEqual([]);
      await eventsUntil(sessionId, (e) => e.event_type === 'turn_complete' && e.seq > next.seq);
    } finally {
      await pool.close(0);
      stack.pools.splice(stack.pools.indexOf(pool), 1);
    }
  });

  it('a pending approval times out through a delayed job: the model gets "approval timed out"', async () => {
    const pool = await stack.addWorkerPool();
    try {
      const sessionId = await httpSession([{ tool: 'calculate', action: 'ask', timeout_secs: 1 }]);
      await api().post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${CALC('1+1')}` });
      const log = await eventsUntil(sessionId, (e) => e.event_type === 'turn_complete');
      expect(log.find((e) => e.event_type === 'approval_resolved')!.payload).toMatchObject({ approved: false, status: 'expired', reason: 'approval timed out', decided_by: '' });
      expect(text(log)).toContain('error: approval timed out');
    } finally {
      await pool.close(0);
      stack.pools.splice(stack.pools.indexOf(pool), 1);
    }
  });

  it('CancelTurn cancels pending approvals; a later decision is 409', async () => {
    const pool = await stack.addWorkerPool();
    try {
      const sessionId = await httpSession([{ tool: '*', action: 'ask' }]);
      await api().post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${CALC('1+1')}` });
      const asked = (await eventsUntil(sessionId, (e) => e.event_type === 'approval_requested')).find((e) => e.event_type === 'approval_requested')!;
      await parkedWithNoActiveJob(sessionId);
      expect((await api().post(`/api/sessions/${sessionId}/cancel`, {})).status).toBe(200);
      const log = await eventsUntil(sessionId, (e) => e.event_type === 'turn_complete');
      expect(log.find((e) => e.event_type === 'approval_resolved')!.payload).toMatchObject({ approval_id: asked.payload.approval_id, status: 'cancelled', approved: false });
      expect(log.find((e) => e.event_type === 'turn_complete')!.payload.stop_reason).toBe('cancelled');
      const late = await api().post<{ error: { message: string } }>(`/api/approvals/${asked.payload.approval_id}/decision`, { approved: true });
      expect(late.status).toBe(409);
    } finally {
      await pool.close(0);
      stack.pools.splice(stack.pools.indexOf(pool), 1);
    }
  });

  it('a steer (interrupt mode immediate) while the turn waits on an approval cancels nothing: it is queued and delivered after the decision', async () => {
    const pool = await stack.addWorkerPool();
    try {
      const { sessionId, asked } = await parkedOnAsk('1+1');
      const session = await api().get<{ session: { interrupt_mode: string } }>(`/api/sessions/${sessionId}`);
      expect(session.body.session.interrupt_mode).toBe('immediate');

      const steer = await api().post<{ outcome: string }>(`/api/sessions/${sessionId}/steer`, { content: 'Only the total matters', input_id: 's1' });
      expect(steer.status).toBe(202);
      expect(steer.body.outcome).toBe('queued');
      // The parked turn goes on waiting: the approval is pending and the turn has not ended.
      expect((await api().get<{ approval: Approval }>(`/api/approvals/${asked.payload.approval_id}`)).body.approval.status).toBe('pending');
      expect((await events(sessionId)).filter((e) => ['approval_resolved', 'turn_complete', 'input_dropped'].includes(e.event_type))).toEqual([]);
      await parkedWithNoActiveJob(sessionId);

      expect((await second().post(`/api/approvals/${asked.payload.approval_id}/decision`, { approved: true })).status).toBe(200);
      const log = await eventsUntil(sessionId, (e) => e.event_type === 'turn_complete');
      const types = log.map((e) => e.event_type).filter((t) => !t.endsWith('_delta'));
      // The tool ran, then the steer reached the model at the next boundary of the same turn.
      expect(types.indexOf('approval_resolved')).toBeLessThan(types.indexOf('tool_result'));
      expect(types.indexOf('tool_result')).toBeLessThan(types.indexOf('input_delivered'));
      expect(log.find((e) => e.event_type === 'input_delivered')!.payload).toMatchObject({ input_id: 's1', kind: 'steer', turn: 1 });
      expect(log.find((e) => e.event_type === 'approval_resolved')!.payload).toMatchObject({ status: 'approved' });
      expect(log.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['end_turn']);
    } finally {
      await pool.close(0);
      stack.pools.splice(stack.pools.indexOf(pool), 1);
    }
  });

  it('the defaults with no policy anywhere: a session\'s client tools named shell and write_file ask, any other runs unasked', async () => {
    const pool = await stack.addWorkerPool();
    try {
      // Workspace sess-defaults has no policy, and neither has the session.
      expect((await api().get<{ policy: { rules: unknown[] } }>('/api/workspaces/sess-defaults/approval-policy')).body.policy.rules).toEqual([]);
      const tool = (name: string) => ({ name, parameters: { type: 'object', properties: { arg: { type: 'string' } } } });
      const created = await api().post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'sess-defaults', tools: [tool('shell'), tool('write_file'), tool('lookup')] });
      const sessionId = created.body.session.session_id;
      const call = (name: string) => `[[scripted:call=${name}({"arg":"x"})]]`;
      await api().post(`/api/sessions/${sessionId}/messages`, { content: `Three [[scripted:parallel]] ${call('shell')} ${call('write_file')} ${call('lookup')}` });
      const log = await eventsUntil(sessionId, (e) => e.event_type === 'approval_requested' && e.payload.index === 2);
      expect(log.filter((e) => e.event_type === 'approval_requested').map((e) => [e.payload.tool_name, e.payload.reason, e.payload.timeout_secs])).toEqual([
        ['shell', 'shell runs commands on the host', 600], ['write_file', 'write_file changes files on the host', 600],
      ]);
      // lookup was not asked about: its ToolRequest went out at once.
      expect(log.filter((e) => e.event_type === 'tool_request').map((e) => e.payload.tool_name)).toEqual(['lookup']);
      const asked = log.filter((e) => e.event_type === 'approval_requested');
      for (const a of asked) expect((await api().post(`/api/approvals/${a.payload.approval_id}/decision`, { approved: false, reason: 'no host tools' })).status).toBe(200);
      const lookup = log.find((e) => e.event_type === 'tool_request')!;
      await api().post(`/api/sessions/${sessionId}/tool-results`, { tool_call_id: lookup.payload.tool_call_id, success: true, result: 'found' });
      const done = await eventsUntil(sessionId, (e) => e.event_type === 'turn_complete');
      expect(text(done)).toContain('using 3 tool result(s): error: denied: no host tools; error: denied: no host tools; found');
    } finally {
      await pool.close(0);
      stack.pools.splice(stack.pools.indexOf(pool), 1);
    }
  });

  it('a parked turn keeps every key of its session, and its place in the parked index, until past its last deadline, though the idle TTL is shorter', async () => {
    const pool = await stack.addWorkerPool();
    // Sessions made through this gateway live 60 s after their turn began (the least CADRE_SESSION_IDLE_TTL_SEC takes),
    // their session-scope grants with them; a closed one's keys 60 s (the least CADRE_EVENT_RETENTION_SEC takes).
    const short = httpClient(`http://127.0.0.1:${(await stack.addGateway({ CADRE_SESSION_IDLE_TTL_SEC: '60', CADRE_EVENT_RETENTION_SEC: '60' })).port}`);
    try {
      const created = await short.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'sess-ttl', approval_policy: { rules: [{ tool: 'calculate', action: 'ask', timeout_secs: 3600 }] } });
      const sessionId = created.body.session.session_id;
      // Turn 1 asks and is approved for the session: its record (approvals hash) and the grant outlive it.
      await short.post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${CALC('1+1')}` });
      const first = (await eventsUntil(sessionId, (e) => e.event_type === 'approval_requested')).find((e) => e.event_type === 'approval_requested')!;
      await short.post(`/api/approvals/${first.payload.approval_id}/decision`, { approved: true, scope: 'session' });
      const end1 = (await eventsUntil(sessionId, (e) => e.event_type === 'turn_complete')).find((e) => e.event_type === 'turn_complete')!.seq;
      // Turn 2 asks with an hour to decide and parks; a steer is queued while it waits.
      await short.post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${CALC('2+2')}` });
      const asked = (await eventsUntil(sessionId, (e) => e.event_type === 'approval_requested' && e.seq > end1)).find((e) => e.event_type === 'approval_requested' && e.seq > end1)!;
      await parkedWithNoActiveJob(sessionId);
      expect((await short.post(`/api/sessions/${sessionId}/steer`, { content: 'Be brief' })).status).toBe(202);

      const keys = (await redis.keys(`${stack.prefix}:{s:${sessionId}}:*`)).sort();
      expect(keys.map((k) => k.slice(k.lastIndexOf(':') + 1))).toEqual(['approvals', 'calls', 'events', 'grants', 'meta', 'steer', 'transcript']);
      // Each lives past the approval's deadline (an hour from the ask) plus the idle TTL, not 60 s from the turn's start.
      const deadline = Date.parse(asked.payload.expires_at);
      for (const key of keys) expect({ key, expiresAfterDeadline: Date.now() + (await redis.pttl(key)) > deadline }).toEqual({ key, expiresAfterDeadline: true });
      // cadre_sessions_parked counts the turn that long too (its index entry's score is when it stops counting).
      expect(Number(await redis.zscore(new KeyBuilder(stack.prefix).sessionsParked(), sessionId))).toBeGreaterThan(deadline);

      // A grant for the rest of the session, decided while the turn is parked, lives as long as the session's keys.
      expect((await short.post(`/api/approvals/${asked.payload.approval_id}/decision`, { approved: true, scope: 'session' })).status).toBe(200);
      const grants = new KeyBuilder(stack.prefix).session(sessionId).grants;
      expect(Date.now() + (await redis.pttl(grants))).toBeGreaterThan(deadline);
      const log = await eventsUntil(sessionId, (e) => e.event_type === 'turn_complete' && e.seq > end1);
      expect(log.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['end_turn', 'end_turn']);
    } finally {
      await pool.close(0);
      stack.pools.splice(stack.pools.indexOf(pool), 1);
    }
  });

  it('a reconnecting StreamSession client is sent its pending approval again; a decision from another workspace is 404', async () => {
    const pool = await stack.addWorkerPool();
    try {
      const sessionId = await httpSession([{ tool: 'calculate', action: 'ask' }], 'roz-appr');
      await api().post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${CALC('4+4')}` });
      const log = await eventsUntil(sessionId, (e) => e.event_type === 'activity' && e.payload.state === 'waiting_approval');
      const asked = log.find((e) => e.event_type === 'approval_requested')!;
      const foreign = await httpClient(stack.url, OTHER_KEY).post(`/api/approvals/${asked.payload.approval_id}/decision`, { approved: true });
      expect(foreign.status).toBe(404);
      const s = new SessionStream(client);
      // Resume after everything there is: the waiting approval comes again with its approval_requested's seq.
      s.send({ $case: 'start', value: { environmentId: 'roz-appr', sessionId, afterSeq: log.at(-1)!.seq } });
      const again = await s.waitForCase('activityUpdate');
      expect(again.seq).toBe(asked.seq);
      expect(again.response!.value).toMatchObject({ state: 'waiting_approval', detail: asked.payload.approval_id });
      // roz's first shape named the call: PermissionDecision with the tool_call_id decides it too.
      s.send({ $case: 'permissionDecision', value: { approvalId: asked.payload.tool_call_id, approved: true } });
      await s.waitForCase('turnComplete');
      expect(s.of('textDelta').map((d) => d.content).join('')).toContain('8');
      s.cancel();
    } finally {
      await pool.close(0);
      stack.pools.splice(stack.pools.indexOf(pool), 1);
    }
  });
});

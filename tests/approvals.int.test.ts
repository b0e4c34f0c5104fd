import { Job, Queue } from 'bullmq';
import { AGENT_QUEUE, KeyBuilder, agentJobId } from '@cadre/store';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertContiguous, grpcClient, httpClient, pollUntilTerminal, waitForEvent, waitUntil, watchTeam } from '@cadre/testing';
import type { TeamEvent } from '@cadre/protocol';
import { TestStack } from './support/stack.ts';

const KEY_A = 'key-approvals-ws-a-0123456789';
const KEY_B = 'key-approvals-ws-b-0123456789';

type Requested = Extract<TeamEvent, { event_type: 'worker_approval_requested' }>;
type Resolved = Extract<TeamEvent, { event_type: 'worker_approval_resolved' }>;
interface Approval {
  approval_id: string;
  status: string;
  decided_by?: string;
  tool_name: string;
  arguments: string;
  workspace_id: string;
  task_id: string;
}

let stack: TestStack;
let second: string;
beforeAll(async () => {
  stack = await TestStack.start({ gateways: 2, workers: 1, env: { CADRE_API_KEYS: `wsa:${KEY_A},wsb:${KEY_B}` } });
  second = `http://127.0.0.1:${stack.gateways[1]!.port}`;
});
afterAll(async () => {
  await stack?.stop();
});

const CALC = '[[scripted:call=calculate({"expression":"6*7"})]]';

/** A task whose one worker calls calculate, with `policy` as the task's approval policy. */
async function startTask(workspace: string, key: string, policy?: unknown): Promise<string> {
  const created = await httpClient(stack.url, key).post<{ task: { task_id: string } }>('/api/tasks', {
    workspace_id: workspace,
    goal: 'Multiply',
    team: { workers: [{ role: 'calc', instructions: `Compute. ${CALC}`, tools: ['calculate'] }], ...(policy !== undefined && { approval_policy: policy }) },
  });
  expect(created.status).toBe(201);
  return created.body.task.task_id;
}

const requested = (taskId: string): Promise<Requested> =>
  waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_approval_requested') as Promise<Requested>;

describe('tool approvals for team workers', () => {
  it('a workspace policy asks; an approval from another gateway resumes the worker without re-running its model turn', async () => {
    const api = httpClient(stack.url, KEY_A);
    const put = await api.request('PUT', '/api/workspaces/wsa/approval-policy', { rules: [{ tool: 'calc*', action: 'ask', reason: 'check the maths', timeout_secs: 60 }] });
    expect(put.status).toBe(200);
    expect((await api.get<{ policy: unknown }>('/api/workspaces/wsa/approval-policy')).body.policy).toEqual({ rules: [{ tool: 'calc*', action: 'ask', reason: 'check the maths', timeout_secs: 60 }] });

    const taskId = await startTask('wsa', KEY_A);
    const watching = watchTeam(grpcClient(stack.grpcTarget), { taskId });
    const ask = await requested(taskId);
    expect(ask.payload).toMatchObject({ tool_name: 'calculate', reason: 'check the maths', timeout_secs: 60, arguments: '{"expression":"6*7"}' });

    // The inbox of the workspace shows it pending; the worker's job is delayed, holding no slot.
    const inbox = await httpClient(second, KEY_A).get<{ approvals: Approval[] }>('/api/approvals?workspace_id=wsa&status=pending');
    expect(inbox.body.approvals.map((a) => a.approval_id)).toEqual([ask.payload.approval_id]);
    const redis = stack.redis.connect();
    const queue = new Queue(AGENT_QUEUE, { connection: redis, prefix: new KeyBuilder(stack.prefix).bullPrefix() });
    try {
      expect(await queue.getJobCounts('delayed', 'active')).toEqual({ delayed: 1, active: 0 });
    } finally {
      await queue.close();
      redis.disconnect();
    }

    const decided = await httpClient(second, KEY_A).post<{ approval: Approval }>(`/api/approvals/${ask.payload.approval_id}/decision`, { approved: true });
    expect(decided.status).toBe(200);
    expect(decided.body.approval).toMatchObject({ status: 'approved', decided_by: 'workspace-key:wsa' });
    expect(JSON.stringify(decided.body)).not.toContain(KEY_A);

    const again = await httpClient(stack.url, KEY_A).post<{ error: { message: string } }>(`/api/approvals/${ask.payload.approval_id}/decision`, { approved: false });
    expect(again.status).toBe(409);

    const events = await pollUntilTerminal(stack.url, taskId);
    assertContiguous(events.map((e) => e.seq));
    expect(events.at(-1)!.event_type).toBe('task_completed');
    const calc = events.filter((e) => e.worker_id === 'calc-1');
    expect(calc.map((e) => e.event_type)).toEqual([
      'worker_started', 'worker_phase', 'worker_tool_call', 'worker_approval_requested', 'worker_approval_resolved', 'worker_phase', 'worker_completed', 'worker_exited',
    ]);
    // Turn 1 (the model call that asked for the tool) ran once; the resumed loop went on with turn 2.
    expect(calc.filter((e) => e.event_type === 'worker_phase').map((e) => (e.payload as { turn: number }).turn)).toEqual([1, 2]);
    const done = calc.find((e) => e.event_type === 'worker_completed') as Extract<TeamEvent, { event_type: 'worker_completed' }>;
    expect(done.payload.result).toContain('42');

    const watched = await watching;
    const seven = watched.events.find((e) => e.event?.$case === 'workerApprovalRequested');
    const eight = watched.events.find((e) => e.event?.$case === 'workerApprovalResolved');
    expect(seven?.event).toEqual({ $case: 'workerApprovalRequested', value: { workerId: 'calc-1', taskId, approvalId: ask.payload.approval_id, toolName: 'calculate', reason: 'check the maths', timeoutSecs: 60 } });
    expect(eight?.event).toMatchObject({ $case: 'workerApprovalResolved', value: { workerId: 'calc-1', taskId, approvalId: ask.payload.approval_id, approved: true } });
    expect(seven!.seq).toBe(ask.seq);
    await api.request('PUT', '/api/workspaces/wsa/approval-policy', { rules: [] });
  });

  it('a denial reaches the model as a tool error with the reason, and the worker goes on', async () => {
    const taskId = await startTask('wsa', KEY_A, { rules: [{ tool: 'calculate', action: 'ask' }] });
    const ask = await requested(taskId);
    const denied = await httpClient(second, KEY_A).post<{ approval: Approval }>(`/api/approvals/${ask.payload.approval_id}/decision`, { approved: false, reason: 'not today' });
    expect(denied.body.approval.status).toBe('denied');
    const events = await pollUntilTerminal(stack.url, taskId);
    const resolved = events.find((e) => e.event_type === 'worker_approval_resolved') as Resolved;
    expect(resolved.payload).toMatchObject({ approved: false, status: 'denied', reason: 'not today' });
    const done = events.find((e) => e.worker_id === 'calc-1' && e.event_type === 'worker_completed') as Extract<TeamEvent, { event_type: 'worker_completed' }>;
    expect(done.payload.result).toContain('denied: not today');
    expect(done.payload.result).not.toContain('42');
  });

  it('an approval nobody decides expires at its timeout (a delayed job) and the model is told', async () => {
    const taskId = await startTask('wsa', KEY_A, { rules: [{ tool: 'calculate', action: 'ask', timeout_secs: 1 }] });
    const ask = await requested(taskId);
    const events = await pollUntilTerminal(stack.url, taskId);
    const resolved = events.find((e) => e.event_type === 'worker_approval_resolved') as Resolved;
    expect(resolved.payload).toMatchObject({ approval_id: ask.payload.approval_id, approved: false, status: 'expired', reason: 'approval timed out' });
    const done = events.find((e) => e.worker_id === 'calc-1' && e.event_type === 'worker_completed') as Extract<TeamEvent, { event_type: 'worker_completed' }>;
    expect(done.payload.result).toContain('approval timed out');
    const record = await httpClient(stack.url, KEY_A).get<{ approval: Approval }>(`/api/approvals/${ask.payload.approval_id}`);
    expect(record.body.approval.status).toBe('expired');
  });

  it('cancelling the task cancels its pending approvals; a deny rule never asks', async () => {
    const taskId = await startTask('wsa', KEY_A, { rules: [{ tool: 'calculate', action: 'ask' }] });
    const ask = await requested(taskId);
    expect((await httpClient(stack.url, KEY_A).post(`/api/tasks/${taskId}/cancel`, { reason: 'enough' })).status).toBe(200);
    const record = await httpClient(second, KEY_A).get<{ approval: Approval }>(`/api/approvals/${ask.payload.approval_id}`);
    expect(record.body.approval.status).toBe('cancelled');
    const late = await httpClient(second, KEY_A).post(`/api/approvals/${ask.payload.approval_id}/decision`, { approved: true });
    expect(late.status).toBe(409);
    const events = await pollUntilTerminal(stack.url, taskId);
    expect(events.filter((e) => e.event_type === 'worker_approval_resolved').map((e) => (e.payload as { status: string }).status)).toEqual(['cancelled']);
    const list = await httpClient(stack.url, KEY_A).get<{ approvals: Approval[] }>(`/api/approvals?workspace_id=wsa&task_id=${taskId}`);
    expect(list.body.approvals.map((a) => a.status)).toEqual(['cancelled']);

    const denied = await startTask('wsa', KEY_A, { rules: [{ tool: 'calc*', action: 'deny', reason: 'no maths here' }] });
    const denyEvents = await pollUntilTerminal(stack.url, denied);
    expect(denyEvents.some((e) => e.event_type === 'worker_approval_requested')).toBe(false);
    const done = denyEvents.find((e) => e.worker_id === 'calc-1' && e.event_type === 'worker_completed') as Extract<TeamEvent, { event_type: 'worker_completed' }>;
    expect(done.payload.result).toContain('no maths here');
  });

  it('a worker parks again at a later turn; each call gets its own record and decision', async () => {
    const api = httpClient(stack.url, KEY_A);
    const created = await api.post<{ task: { task_id: string } }>('/api/tasks', {
      workspace_id: 'wsa',
      goal: 'Multiply twice',
      team: {
        workers: [{ role: 'calc', instructions: `Compute. ${CALC} [[scripted:call=calculate({"expression":"5*5"})]]`, tools: ['calculate'] }],
        approval_policy: { rules: [{ tool: 'calculate', action: 'ask' }] },
      },
    });
    const taskId = created.body.task.task_id;
    const first = await requested(taskId);
    expect(first.payload.arguments).toBe('{"expression":"6*7"}');
    await api.post(`/api/approvals/${first.payload.approval_id}/decision`, { approved: true });
    const second = (await waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_approval_requested' && e.seq > first.seq)) as Requested;
    expect(second.payload.arguments).toBe('{"expression":"5*5"}');
    expect(second.payload.approval_id).not.toBe(first.payload.approval_id);
    await api.post(`/api/approvals/${second.payload.approval_id}/decision`, { approved: false, reason: 'one is enough' });
    const events = await pollUntilTerminal(stack.url, taskId);
    const calc = events.filter((e) => e.worker_id === 'calc-1');
    // Three model turns in all, each run once: the parks resumed at their tool calls.
    expect(calc.filter((e) => e.event_type === 'worker_phase').map((e) => (e.payload as { turn: number }).turn)).toEqual([1, 2, 3]);
    const done = calc.find((e) => e.event_type === 'worker_completed') as Extract<TeamEvent, { event_type: 'worker_completed' }>;
    expect(done.payload.result).toContain('one is enough');
    const all = (await api.get<{ approvals: Approval[] }>(`/api/approvals?workspace_id=wsa&task_id=${taskId}`)).body.approvals;
    expect(all.map((a) => a.status)).toEqual(['approved', 'denied']);
  });

  it('two calls of one model answer that ask: each gets its own record, in the model\'s order; the worker waits for both', async () => {
    const api = httpClient(stack.url, KEY_A);
    const created = await api.post<{ task: { task_id: string } }>('/api/tasks', {
      workspace_id: 'wsa',
      goal: 'Two sums',
      team: {
        workers: [{ role: 'calc', instructions: `Compute. [[scripted:parallel]] [[scripted:call=calculate({"expression":"1+1"})]] [[scripted:call=calculate({"expression":"2+3"})]]`, tools: ['calculate'] }],
        approval_policy: { rules: [{ tool: 'calculate', action: 'ask' }] },
      },
    });
    const taskId = created.body.task.task_id;
    let pending: (Approval & { order: number })[] = [];
    await waitUntil('both calls to ask', async () => {
      pending = (await api.get<{ approvals: typeof pending }>(`/api/approvals?workspace_id=wsa&task_id=${taskId}&status=pending`)).body.approvals;
      return pending.length === 2;
    });
    expect(pending.map((a) => [a.order, a.arguments])).toEqual([[0, '{"expression":"1+1"}'], [1, '{"expression":"2+3"}']]);
    expect(new Set(pending.map((a) => a.approval_id)).size).toBe(2);

    // The second decided first: the parked worker's job stays delayed (nothing promotes it) until the first is decided too.
    const redis = stack.redis.connect();
    const queue = new Queue(AGENT_QUEUE, { connection: redis, prefix: new KeyBuilder(stack.prefix).bullPrefix() });
    try {
      const state = async () => (await Job.fromId(queue, agentJobId(taskId, 'calc-1')))!.getState();
      await expect.poll(state).toBe('delayed');
      expect((await httpClient(second, KEY_A).post(`/api/approvals/${pending[1]!.approval_id}/decision`, { approved: true })).status).toBe(200);
      expect(await state()).toBe('delayed');
    } finally {
      await queue.close();
      redis.disconnect();
    }
    expect((await httpClient(second, KEY_A).post(`/api/approvals/${pending[0]!.approval_id}/decision`, { approved: false, reason: 'not that one' })).status).toBe(200);

    const events = await pollUntilTerminal(stack.url, taskId);
    const calc = events.filter((e) => e.worker_id === 'calc-1');
    expect(calc.filter((e) => e.event_type === 'worker_approval_requested').map((e) => (e as Requested).payload.arguments)).toEqual(['{"expression":"1+1"}', '{"expression":"2+3"}']);
    expect(calc.filter((e) => e.event_type === 'worker_approval_resolved').map((e) => (e as Resolved).payload.status)).toEqual(['approved', 'denied']);
    // One model answer asked both; the next one (turn 2) saw both outcomes, in the model's order.
    expect(calc.filter((e) => e.event_type === 'worker_phase').map((e) => (e.payload as { turn: number }).turn)).toEqual([1, 2]);
    const done = calc.find((e) => e.event_type === 'worker_completed') as Extract<TeamEvent, { event_type: 'worker_completed' }>;
    expect(done.payload.result).toMatch(/using 2 tool result\(s\): error: tool call denied: not that one; 5/);
  });

  it("another workspace's key sees 404 and cannot decide; bad input is a 400", async () => {
    const taskId = await startTask('wsa', KEY_A, { rules: [{ tool: 'calculate', action: 'ask' }] });
    const ask = await requested(taskId);
    const other = httpClient(second, KEY_B);
    expect((await other.get(`/api/approvals/${ask.payload.approval_id}`)).status).toBe(404);
    expect((await other.post(`/api/approvals/${ask.payload.approval_id}/decision`, { approved: true })).status).toBe(404);
    expect((await other.get('/api/approvals?workspace_id=wsa')).status).toBe(403);
    expect((await other.request('PUT', '/api/workspaces/wsa/approval-policy', { rules: [] })).status).toBe(403);
    const mine = httpClient(stack.url, KEY_A);
    expect((await mine.post(`/api/approvals/${ask.payload.approval_id}/decision`, { approved: 'yes' })).status).toBe(400);
    expect((await mine.request('PUT', '/api/workspaces/wsa/approval-policy', { rules: [{ tool: 'x', action: 'maybe' }] })).status).toBe(400);
    expect((await mine.get('/api/approvals/nope')).status).toBe(404);
    expect((await mine.get<{ approval: Approval }>(`/api/approvals/${ask.payload.approval_id}`)).body.approval.status).toBe('pending');
    await mine.post(`/api/approvals/${ask.payload.approval_id}/decision`, { approved: true });
    expect((await pollUntilTerminal(stack.url, taskId)).at(-1)!.event_type).toBe('task_completed');
  });
});

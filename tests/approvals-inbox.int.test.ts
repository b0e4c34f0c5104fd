import type { ChildProcess } from 'node:child_process';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { AGENT_QUEUE, KeyBuilder } from '@cadre/store';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_API_KEY, assertContiguous, grpcClient, httpClient, pollUntilTerminal, runsCall, waitForEvent, waitUntil, watchTeam } from '@cadre/testing';
import type { TeamEvent } from '@cadre/protocol';
import { TestStack } from './support/stack.ts';

// The approvals inbox beyond one decision: modifiers, approval for the rest of a task, decisions in bulk, the
// inbox's SSE stream and its pages, per-worker rules with argument conditions, stop-all, and a worker killed
// with kill -9 while its approval waits. Decisions go to a second gateway, as an operator's would.

const KEY_C = 'key-inbox-ws-c-0123456789abc';
const KEY_D = 'key-inbox-ws-d-0123456789abc';
const RUNS_KEY = 'inbox-runs-key-0123456789';
const CONTROL_KEY = 'inbox-control-key-0123456789';

type Requested = Extract<TeamEvent, { event_type: 'worker_approval_requested' }>;
type Resolved = Extract<TeamEvent, { event_type: 'worker_approval_resolved' }>;
type Completed = Extract<TeamEvent, { event_type: 'worker_completed' }>;
interface Approval {
  approval_id: string;
  status: string;
  task_id: string;
  tool_name: string;
  arguments: string;
  modifier?: string;
  scope?: string;
  decided_by?: string;
}
interface BulkResult {
  approval_id: string;
  outcome: string;
  approval?: Approval;
}

let stack: TestStack;
let second: string;
beforeAll(async () => {
  stack = await TestStack.start({
    gateways: 2,
    workers: 1,
    env: { CADRE_API_KEYS: `wsc:${KEY_C},wsd:${KEY_D}`, RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: CONTROL_KEY },
  });
  second = `http://127.0.0.1:${stack.gateways[1]!.port}`;
});
afterAll(async () => {
  await stack?.stop();
});

const calc = (expression: string): string => `[[scripted:call=calculate(${JSON.stringify({ expression })})]]`;
const ASK_CALC = { rules: [{ tool: 'calculate', action: 'ask' }] };

/** A task in `workspace` whose one worker runs `calls` (one model turn each). */
async function startTask(workspace: string, key: string, calls: string[], policy: { task?: unknown; worker?: unknown } = { task: ASK_CALC }): Promise<string> {
  const created = await httpClient(stack.url, key).post<{ task: { task_id: string } }>('/api/tasks', {
    workspace_id: workspace,
    goal: 'Compute',
    team: {
      workers: [{ role: 'calc', instructions: `Compute. ${calls.join(' ')}`, tools: ['calculate'], ...(policy.worker !== undefined && { approval_policy: policy.worker }) }],
      ...(policy.task !== undefined && { approval_policy: policy.task }),
    },
  });
  expect(created.status).toBe(201);
  return created.body.task.task_id;
}

const requestedAfter = (taskId: string, afterSeq = 0): Promise<Requested> =>
  waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_approval_requested' && e.seq > afterSeq) as Promise<Requested>;

const resultOf = (events: TeamEvent[]): string => (events.find((e) => e.worker_id === 'calc-1' && e.event_type === 'worker_completed') as Completed).payload.result;

/** The session's pending approval, once it has asked (read on the gateway at `base`). */
async function pendingApprovalOf(base: string, workspaceId: string, sessionId: string): Promise<Approval> {
  let found: Approval | undefined;
  await waitUntil('the session to ask', async () => {
    found = (await httpClient(base, TEST_API_KEY).get<{ approvals: Approval[] }>(`/api/approvals?workspace_id=${workspaceId}&session_id=${sessionId}&status=pending`)).body.approvals[0];
    return found !== undefined;
  });
  return found!;
}

/** Reads the inbox's SSE stream until `count` frames arrived, then hangs up. */
async function readInbox(base: string, key: string, query: string, count: number, headers: Record<string, string> = {}): Promise<{ status: number; frames: { id: number; event: string; data: Approval & { seq: number } }[] }> {
  const ac = new AbortController();
  const res = await fetch(`${base}/api/approvals/stream?${query}`, { headers: { authorization: `Bearer ${key}`, ...headers }, signal: ac.signal });
  const frames: { id: number; event: string; data: Approval & { seq: number } }[] = [];
  if (res.status !== 200 || !res.body) return { status: res.status, frames };
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for await (const chunk of res.body) {
      buffer += decoder.decode(chunk as Uint8Array, { stream: true });
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const field = (name: string): string | undefined => block.split('\n').find((l) => l.startsWith(`${name}: `))?.slice(name.length + 2);
        const data = field('data');
        if (data === undefined) continue;
        const parsed = JSON.parse(data) as { seq: number; payload: Approval };
        frames.push({ id: Number(field('id')), event: field('event')!, data: { ...parsed.payload, seq: parsed.seq } });
      }
      if (frames.length >= count) break;
    }
  } finally {
    ac.abort();
  }
  return { status: res.status, frames };
}

describe('approvals inbox', () => {
  it('an approval with a modifier runs the tool with the amended arguments; a modifier the tool refuses is a 400 and writes nothing', async () => {
    const taskId = await startTask('wsc', KEY_C, [calc('6*7')]);
    const watching = watchTeam(grpcClient(stack.grpcTarget), { taskId }, KEY_C);
    const ask = await requestedAfter(taskId);
    const api = httpClient(second, KEY_C);
    const url = `/api/approvals/${ask.payload.approval_id}/decision`;
    expect((await api.post(url, { approved: true, modifier: { expression: 5 } })).status).toBe(400);
    expect((await api.post(url, { approved: true, modifier: { expr: '5*5' } })).status).toBe(400);
    expect((await api.post(url, { approved: false, modifier: { expression: '5*5' } })).status).toBe(400);
    expect((await api.post(url, { approved: true, scope: 'forever' })).status).toBe(400);
    expect((await api.get<{ approval: Approval }>(`/api/approvals/${ask.payload.approval_id}`)).body.approval.status).toBe('pending');

    const decided = await api.post<{ approval: Approval }>(url, { approved: true, modifier: { expression: '5*5' } });
    expect(decided.status).toBe(200);
    expect(decided.body.approval).toMatchObject({ status: 'approved', modifier: '{"expression":"5*5"}', decided_by: 'workspace-key:wsc' });
    const events = await pollUntilTerminal(stack.url, taskId);
    assertContiguous(events.map((e) => e.seq));
    expect((events.find((e) => e.event_type === 'worker_approval_resolved') as Resolved).payload).toMatchObject({ approved: true, modifier: '{"expression":"5*5"}' });
    expect(resultOf(events)).toContain('25');
    expect(resultOf(events)).not.toContain('42');
    // WatchTeam tag 8 carries the modifier as roz's Struct, over a real grpc-js client.
    const eight = (await watching).events.find((e) => e.event?.$case === 'workerApprovalResolved');
    expect(eight?.event).toEqual({ $case: 'workerApprovalResolved', value: { workerId: 'calc-1', taskId, approvalId: ask.payload.approval_id, approved: true, modifier: { expression: '5*5' } } });
  });

  it('approved for the rest of the task: the same tool and arguments no longer ask, other arguments still do', async () => {
    const taskId = await startTask('wsc', KEY_C, [calc('6*7'), calc('6*7'), calc('5*5')]);
    const first = await requestedAfter(taskId);
    await httpClient(second, KEY_C).post(`/api/approvals/${first.payload.approval_id}/decision`, { approved: true, scope: 'task' });
    const next = await requestedAfter(taskId, first.seq);
    expect(next.payload.arguments).toBe('{"expression":"5*5"}');
    await httpClient(second, KEY_C).post(`/api/approvals/${next.payload.approval_id}/decision`, { approved: true });
    const events = await pollUntilTerminal(stack.url, taskId);
    expect(events.filter((e) => e.event_type === 'worker_approval_requested')).toHaveLength(2);
    expect(events.filter((e) => e.event_type === 'worker_tool_call')).toHaveLength(3);
    const all = (await httpClient(stack.url, KEY_C).get<{ approvals: Approval[] }>(`/api/approvals?workspace_id=wsc&task_id=${taskId}`)).body.approvals;
    expect(all.map((a) => [a.arguments, a.status, a.scope])).toEqual([['{"expression":"6*7"}', 'approved', 'task'], ['{"expression":"5*5"}', 'approved', 'once']]);
  });

  it('approved for the rest of the task with a modifier: the amended arguments no longer ask, the model\'s original ones still do (as a session\'s)', async () => {
    const taskId = await startTask('wsc', KEY_C, [calc('6*7'), calc('5*5'), calc('6*7')]);
    const first = await requestedAfter(taskId);
    expect(first.payload.arguments).toBe('{"expression":"6*7"}');
    await httpClient(second, KEY_C).post(`/api/approvals/${first.payload.approval_id}/decision`, { approved: true, scope: 'task', modifier: { expression: '5*5' } });
    // The second call (5*5) is what the approver let run: it runs unasked. The third (the model's 6*7) asks.
    const next = await requestedAfter(taskId, first.seq);
    expect(next.payload.arguments).toBe('{"expression":"6*7"}');
    await httpClient(second, KEY_C).post(`/api/approvals/${next.payload.approval_id}/decision`, { approved: true });
    const events = await pollUntilTerminal(stack.url, taskId);
    expect(events.filter((e) => e.event_type === 'worker_approval_requested')).toHaveLength(2);
    expect(events.filter((e) => e.event_type === 'worker_tool_call')).toHaveLength(3);
  });

  it('a worker\'s own rules come first and match on arguments; the task\'s rules apply to the rest', async () => {
    const taskId = await startTask('wsc', KEY_C, [calc('1+1'), calc('2*3')], {
      worker: { rules: [{ tool: 'calculate', when: { expression: { glob: '*+*' } }, action: 'allow' }] },
      task: { rules: [{ tool: 'calculate', when: { expression: { regex: '\\*' } }, action: 'ask', reason: 'products need a look' }] },
    });
    const ask = await requestedAfter(taskId);
    expect(ask.payload).toMatchObject({ arguments: '{"expression":"2*3"}', reason: 'products need a look' });
    await httpClient(second, KEY_C).post(`/api/approvals/${ask.payload.approval_id}/decision`, { approved: true });
    const events = await pollUntilTerminal(stack.url, taskId);
    expect(events.filter((e) => e.event_type === 'worker_approval_requested')).toHaveLength(1);
    expect(resultOf(events)).toContain('6');

    const bad = await httpClient(stack.url, KEY_C).post<{ error: { message: string } }>('/api/tasks', {
      workspace_id: 'wsc',
      goal: 'x',
      team: { workers: [{ role: 'calc', tools: ['calculate'], approval_policy: { rules: [{ tool: 'calculate', when: { expression: { regex: '(' } }, action: 'ask' }] } }] },
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toContain('team.workers[0].approval_policy.rules[0].when.expression.regex does not compile');
    expect((await httpClient(stack.url, KEY_C).request('PUT', '/api/workspaces/wsc/approval-policy', { rules: [{ tool: 'x', action: 'ask', when: { a: { glob: '*', regex: 'b' } } }] })).status).toBe(400);
  });

  it('the inbox streams requested and decided over SSE, resumes from Last-Event-ID, pages with a cursor, and bulk-decides by ids and by filter', async () => {
    // Workspace wsd's inbox is this test's alone: its log starts here. A reader follows it live from the start.
    const liveReader = readInbox(second, KEY_D, 'workspace_id=wsd', 6);
    const tasks: string[] = [];
    const asks: Requested[] = [];
    for (const expression of ['1*1', '2*2', '3*3']) {
      const taskId = await startTask('wsd', KEY_D, [calc(expression)]);
      tasks.push(taskId);
      asks.push(await requestedAfter(taskId));
    }
    const ids = asks.map((a) => a.payload.approval_id);

    // Pages of one, oldest first, each cursor opaque: the three pending ones in the order they asked.
    const api = httpClient(second, KEY_D);
    const seen: Approval[] = [];
    let cursor: string | null = null;
    do {
      const page: { status: number; body: { approvals: Approval[]; next_cursor: string | null } } = await api.get(`/api/approvals?workspace_id=wsd&status=pending&limit=1${cursor ? `&cursor=${cursor}` : ''}`);
      expect(page.status).toBe(200);
      expect(page.body.approvals).toHaveLength(1);
      seen.push(...page.body.approvals);
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(seen.map((a) => a.approval_id)).toEqual(ids);
    expect((await api.get('/api/approvals?workspace_id=wsd&cursor=not-a-cursor')).status).toBe(400);
    expect((await api.get('/api/approvals?workspace_id=wsd&limit=0')).status).toBe(400);

    // Bulk by ids: the first, decided on its own just before, is a conflict; an unknown id is not_found; the
    // second is decided. Another workspace's key cannot bulk-decide by filter (403) nor see these ids (not_found).
    await api.post(`/api/approvals/${ids[0]}/decision`, { approved: true });
    expect((await httpClient(stack.url, KEY_C).post('/api/approvals/decisions', { filter: { workspace_id: 'wsd' }, approved: true })).status).toBe(403);
    const foreign = await httpClient(stack.url, KEY_C).post<{ results: BulkResult[] }>('/api/approvals/decisions', { ids: [ids[1]], approved: true });
    expect(foreign.body.results).toEqual([{ approval_id: ids[1], outcome: 'not_found', error: `approval ${ids[1]} not found` }]);
    expect((await api.post('/api/approvals/decisions', { approved: true })).status).toBe(400);
    expect((await api.post('/api/approvals/decisions', { ids: [ids[1]], filter: { workspace_id: 'wsd' }, approved: true })).status).toBe(400);
    expect((await api.post('/api/approvals/decisions', { ids: [ids[1]], approved: true, modifier: { expression: '1' } })).status).toBe(400);
    const bulk = await api.post<{ results: BulkResult[] }>('/api/approvals/decisions', { ids: [ids[0], ids[1], 'nope'], approved: true, reason: 'batch' });
    expect(bulk.status).toBe(200);
    expect(bulk.body.results.map((r) => [r.approval_id, r.outcome, r.approval?.status])).toEqual([
      [ids[0], 'conflict', 'approved'], [ids[1], 'decided', 'approved'], ['nope', 'not_found', undefined],
    ]);
    // Bulk by filter: every pending one of the workspace (the third), denied.
    const byFilter = await api.post<{ results: BulkResult[] }>('/api/approvals/decisions', { filter: { workspace_id: 'wsd' }, approved: false, reason: 'not now' });
    expect(byFilter.body.results.map((r) => [r.approval_id, r.outcome, r.approval?.status])).toEqual([[ids[2], 'decided', 'denied']]);
    const results = await Promise.all(tasks.map((t) => pollUntilTerminal(stack.url, t)));
    expect(results.map((events) => events.at(-1)!.event_type)).toEqual(['task_completed', 'task_completed', 'task_completed']);
    expect(resultOf(results[2]!)).toContain('not now');

    // The live reader saw each transition once, in order, with its seq as the SSE id.
    const live = await liveReader;
    expect(live.status).toBe(200);
    expect(live.frames.map((f) => [f.id, f.event, f.data.approval_id, f.data.status])).toEqual([
      [1, 'approval_requested', ids[0], 'pending'], [2, 'approval_requested', ids[1], 'pending'], [3, 'approval_requested', ids[2], 'pending'],
      [4, 'approval_decided', ids[0], 'approved'], [5, 'approval_decided', ids[1], 'approved'], [6, 'approval_decided', ids[2], 'denied'],
    ]);
    // A reader that reconnects with Last-Event-ID 4 is sent the rest, from the other gateway.
    const resumed = await readInbox(stack.url, KEY_D, 'workspace_id=wsd', 2, { 'last-event-id': '4' });
    expect(resumed.frames.map((f) => f.id)).toEqual([5, 6]);
    expect((await readInbox(stack.url, KEY_D, 'workspace_id=wsd', 0, { 'last-event-id': 'x' })).status).toBe(400);
    expect((await readInbox(stack.url, KEY_D, 'workspace_id=wsd&after_seq=99', 0)).status).toBe(410);
    expect((await readInbox(stack.url, KEY_C, 'workspace_id=wsd', 0)).status).toBe(403);
  });

  it("bulk decisions by ids: another workspace's session and VM run approvals are not_found, and nothing changes", async () => {
    // Workspace wsr (the operator key's) owns a session's pending approval and a VM run's; KEY_C reaches only wsc.
    const owner = httpClient(stack.url, TEST_API_KEY);
    const created = await owner.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'wsr', approval_policy: ASK_CALC });
    const sessionId = created.body.session.session_id;
    await owner.post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${calc('2+2')}` });
    const sessionAsk = (await pendingApprovalOf(stack.url, 'wsr', sessionId)).approval_id;
    expect((await owner.request('PUT', '/api/workspaces/wsr/approval-policy', { rules: [{ tool: 'shell', action: 'ask' }] })).status).toBe(200);
    const run = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: 'wsr', query: 'list files' });
    const hb = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/workers/heartbeat', { workspace_id: 'wsr', worker_id: 'vm-1', status: 'ready', metadata: {} });
    const assigned = hb.body.assigned_run as { run_id: string; lease_id: string };
    expect(assigned.run_id).toBe(run.body.run.run_id);
    const proposed = await runsCall(stack.url, RUNS_KEY, 'POST', `/api/runs/${assigned.run_id}/approvals`, {
      worker_id: 'vm-1', lease_id: assigned.lease_id, calls: [{ call_id: 'c1', tool_name: 'shell', arguments: '{"command":"ls"}' }],
    });
    const runAsk = (proposed.body.verdicts as { action: string; approval_id: string }[])[0]!;
    expect(runAsk.action).toBe('ask');

    const foreign = await httpClient(second, KEY_C).post<{ results: BulkResult[] }>('/api/approvals/decisions', { ids: [sessionAsk, runAsk.approval_id], approved: true });
    expect(foreign.status).toBe(200);
    expect(foreign.body.results).toEqual([
      { approval_id: sessionAsk, outcome: 'not_found', error: `approval ${sessionAsk} not found` },
      { approval_id: runAsk.approval_id, outcome: 'not_found', error: `approval ${runAsk.approval_id} not found` },
    ]);
    // Nothing changed: both still pending, and neither owner's log heard of a decision.
    for (const id of [sessionAsk, runAsk.approval_id]) {
      expect((await owner.get<{ approval: Approval }>(`/api/approvals/${id}`)).body.approval).toMatchObject({ status: 'pending' });
    }
    const sessionLog = await owner.get<{ events: { event_type: string }[] }>(`/api/sessions/${sessionId}/events?limit=1000`);
    expect(sessionLog.body.events.map((e) => e.event_type)).toContain('approval_requested');
    expect(sessionLog.body.events.map((e) => e.event_type)).not.toContain('approval_resolved');
    const runLog = await runsCall(stack.url, RUNS_KEY, 'GET', `/api/runs/${assigned.run_id}/events`);
    const runTypes = (runLog.body.events as { event_type: string }[]).map((e) => e.event_type);
    expect(runTypes).toContain('approval-requested');
    expect(runTypes).not.toContain('approval-resolved');

    // The owner decides them; a second decision is 409 for either kind.
    for (const id of [sessionAsk, runAsk.approval_id]) {
      expect((await owner.post(`/api/approvals/${id}/decision`, { approved: false })).status).toBe(200);
      expect((await owner.post(`/api/approvals/${id}/decision`, { approved: true })).status).toBe(409);
    }
  });

  it('stop-all cancels the pending approvals of the workspace\'s tasks', async () => {
    const taskId = await startTask('wsc', KEY_C, [calc('7*7')]);
    const ask = await requestedAfter(taskId);
    const stopped = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/stop-all', { workspace_id: 'wsc' }, { 'x-windie-runs-key': null, 'x-windie-runs-control-key': CONTROL_KEY });
    expect(stopped.status).toBe(200);
    expect(stopped.body.stopped_task_ids).toEqual([taskId]);
    const record = await httpClient(second, KEY_C).get<{ approval: Approval }>(`/api/approvals/${ask.payload.approval_id}`);
    expect(record.body.approval).toMatchObject({ status: 'cancelled', decided_by: '' });
    expect((await httpClient(second, KEY_C).post(`/api/approvals/${ask.payload.approval_id}/decision`, { approved: true })).status).toBe(409);
    const events = await pollUntilTerminal(stack.url, taskId);
    expect(events.filter((e) => e.event_type === 'worker_approval_resolved').map((e) => (e as Resolved).payload.status)).toEqual(['cancelled']);
    expect(events.at(-1)!.event_type).toBe('task_cancelled');
  });
});

describe('a worker killed while its approval waits', () => {
  let crash: TestStack;
  beforeAll(async () => {
    crash = await TestStack.start({ workers: 0, env: { CADRE_JOB_LOCK_MS: '1500' } });
  });
  afterAll(async () => {
    await crash?.stop();
  });

  it('kill -9 of the worker process changes nothing: the task finishes on another process after the decision', async () => {
    const first: ChildProcess = await crash.spawnWorkerProcess();
    const created = await httpClient(crash.url, TEST_API_KEY).post<{ task: { task_id: string } }>('/api/tasks', {
      workspace_id: 'crash',
      goal: 'Compute',
      team: { workers: [{ role: 'calc', instructions: `Compute. ${calc('6*7')}`, tools: ['calculate'] }], approval_policy: ASK_CALC },
    });
    const taskId = created.body.task.task_id;
    const ask = (await waitForEvent(crash.url, taskId, (e) => e.event_type === 'worker_approval_requested')) as Requested;
    // Parked: the job waits as a delayed job, so the process holds nothing of it.
    const redis = new Redis(crash.redis.url);
    const queue = new Queue(AGENT_QUEUE, { connection: redis, prefix: new KeyBuilder(crash.prefix).bullPrefix() });
    try {
      await expect.poll(() => queue.getJobCounts('delayed', 'active')).toEqual({ delayed: 1, active: 0 });
    } finally {
      await queue.close();
      redis.disconnect();
    }
    first.kill('SIGKILL');
    await new Promise((resolve) => first.once('exit', resolve));
    expect((await httpClient(crash.url, TEST_API_KEY).post(`/api/approvals/${ask.payload.approval_id}/decision`, { approved: true })).status).toBe(200);
    const other = await crash.spawnWorkerProcess();
    try {
      const events = await pollUntilTerminal(crash.url, taskId, 30_000);
      assertContiguous(events.map((e) => e.seq));
      const calcEvents = events.filter((e) => e.worker_id === 'calc-1').map((e) => `${e.event_type}#${e.attempt}`);
      // One attempt, no failure: the kill happened while nothing ran.
      expect(calcEvents).toEqual([
        'worker_started#1', 'worker_phase#1', 'worker_tool_call#1', 'worker_approval_requested#1', 'worker_approval_resolved#1', 'worker_phase#1', 'worker_completed#1', 'worker_exited#1',
      ]);
      expect(resultOf(events)).toContain('42');
    } finally {
      other.kill('SIGKILL');
    }
  });

  it("a session's approvals are in the workspace's inbox stream too: asked, decided, and cancelled with its turn", async () => {
    // Workspace wss is this test's alone (the operator key reaches it): its inbox log starts here.
    const api = httpClient(stack.url, TEST_API_KEY);
    const session = async (): Promise<string> => {
      const created = await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'wss', approval_policy: ASK_CALC });
      expect(created.status).toBe(201);
      return created.body.session.session_id;
    };
    const pendingOf = (sessionId: string): Promise<Approval> => pendingApprovalOf(second, 'wss', sessionId);
    const decidedOne = await session();
    await api.post(`/api/sessions/${decidedOne}/messages`, { content: `Sum ${calc('2+2')}` });
    const first = await pendingOf(decidedOne);
    expect((await httpClient(second, TEST_API_KEY).post(`/api/approvals/${first.approval_id}/decision`, { approved: true })).status).toBe(200);
    const cancelledOne = await session();
    await api.post(`/api/sessions/${cancelledOne}/messages`, { content: `Sum ${calc('3+3')}` });
    const other = await pendingOf(cancelledOne);
    expect((await api.post(`/api/sessions/${cancelledOne}/cancel`, {})).status).toBe(200);

    const { frames } = await readInbox(second, TEST_API_KEY, 'workspace_id=wss', 4);
    expect(frames.map((f) => [f.event, f.data.approval_id, f.data.status])).toEqual([
      ['approval_requested', first.approval_id, 'pending'],
      ['approval_decided', first.approval_id, 'approved'],
      ['approval_requested', other.approval_id, 'pending'],
      ['approval_decided', other.approval_id, 'cancelled'],
    ]);
    expect(frames[0]!.data).toMatchObject({ session_id: decidedOne, tool_name: 'calculate', workspace_id: 'wss' });
    expect(frames[1]!.data).toMatchObject({ decided_by: 'operator-key' });
  });

  it("every path that ends a session's turn announces its cancelled approvals: abort with a prompt (the next turn starts at once) and close", async () => {
    // Workspace wsx is this test's alone: its inbox log starts here.
    const api = httpClient(stack.url, TEST_API_KEY);
    const askedIn = (sessionId: string): Promise<Approval> => pendingApprovalOf(stack.url, 'wsx', sessionId);
    const created = await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'wsx', approval_policy: ASK_CALC });
    const sessionId = created.body.session.session_id;
    await api.post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${calc('4+4')}` });
    const aborted = await askedIn(sessionId);
    const abort = await api.post<{ aborted: boolean }>(`/api/sessions/${sessionId}/abort`, { prompt: { content: `Now ${calc('5+5')}` } });
    expect(abort.body.aborted).toBe(true);
    const closed = await askedIn(sessionId);
    expect((await api.request('DELETE', `/api/sessions/${sessionId}`, {})).status).toBe(200);

    const { frames } = await readInbox(second, TEST_API_KEY, 'workspace_id=wsx', 4);
    expect(frames.map((f) => [f.event, f.data.approval_id, f.data.status])).toEqual([
      ['approval_requested', aborted.approval_id, 'pending'],
      ['approval_decided', aborted.approval_id, 'cancelled'],
      ['approval_requested', closed.approval_id, 'pending'],
      ['approval_decided', closed.approval_id, 'cancelled'],
    ]);
    expect(frames[1]!.data).toMatchObject({ session_id: sessionId, decided_by: '' });
  });

  it('scope "session": the same tool and arguments no longer ask for the rest of the session; other arguments still do', async () => {
    const api = httpClient(stack.url, TEST_API_KEY);
    const created = await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'wss2', approval_policy: ASK_CALC });
    const sessionId = created.body.session.session_id;
    type Ev = { seq: number; event_type: string; payload: { approval_id?: string; arguments?: string } };
    const eventsAfter = async (afterSeq: number, type: string): Promise<Ev[]> => {
      let found: Ev[] = [];
      await waitUntil(`a ${type} after seq ${afterSeq}`, async () => {
        found = (await api.get<{ events: Ev[] }>(`/api/sessions/${sessionId}/events?after_seq=${afterSeq}&limit=1000`)).body.events;
        return found.some((e) => e.event_type === type);
      });
      return found;
    };
    await api.post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${calc('2+2')}` });
    const asked = (await eventsAfter(0, 'approval_requested')).find((e) => e.event_type === 'approval_requested')!;
    // A team worker's scope is refused for a session's approval, and nothing is written.
    expect((await api.post(`/api/approvals/${asked.payload.approval_id}/decision`, { approved: true, scope: 'task' })).status).toBe(400);
    const decided = await httpClient(second, TEST_API_KEY).post<{ approval: Approval }>(`/api/approvals/${asked.payload.approval_id}/decision`, { approved: true, scope: 'session' });
    expect(decided.body.approval).toMatchObject({ status: 'approved', scope: 'session' });
    const firstTurn = await eventsAfter(0, 'turn_complete');
    const end1 = firstTurn.find((e) => e.event_type === 'turn_complete')!.seq;

    await api.post(`/api/sessions/${sessionId}/messages`, { content: `Again ${calc('2+2')}` });
    const second2 = await eventsAfter(end1, 'turn_complete');
    // The model called calculate with the same arguments again, and it ran without asking.
    expect(second2.filter((e) => e.event_type === 'tool_call').map((e) => e.payload.arguments)).toEqual(['{"expression":"2+2"}']);
    expect(second2.some((e) => e.event_type === 'approval_requested')).toBe(false);
    const end2 = second2.find((e) => e.event_type === 'turn_complete')!.seq;

    await api.post(`/api/sessions/${sessionId}/messages`, { content: `Other ${calc('3+3')}` });
    const third = (await eventsAfter(end2, 'approval_requested')).find((e) => e.event_type === 'approval_requested')!;
    expect(third.payload.arguments).toBe('{"expression":"3+3"}');
    expect((await api.post(`/api/approvals/${third.payload.approval_id}/decision`, { approved: false })).status).toBe(200);
  });
});

describe('an inbox log that refuses its append', () => {
  it('changes nothing else: workers park and wake, session turns ask, go on and end, cancels answer 200', async () => {
    // Workspace wsf is this test's alone. Its inbox log refuses every write (its meta key is the wrong type), as the
    // workspace's slot would while its node fails over on a Cluster; the owners' slots still take their scripts.
    const redis = new Redis(stack.redis.url);
    try {
      await redis.set(new KeyBuilder(stack.prefix).approvalInbox('wsf').meta, 'not a hash');
    } finally {
      redis.disconnect();
    }
    const api = httpClient(second, TEST_API_KEY);
    const rules = { rules: [{ tool: 'calculate', action: 'ask', timeout_secs: 120 }] };

    // A team worker parks, and the decision wakes it now, not at its 120 s deadline.
    const taskId = await startTask('wsf', TEST_API_KEY, [calc('6*7')], { task: rules });
    const taskAsk = await requestedAfter(taskId);
    const decidedTask = await api.post<{ approval: Approval }>(`/api/approvals/${taskAsk.payload.approval_id}/decision`, { approved: true });
    expect(decidedTask.status).toBe(200);
    expect(decidedTask.body.approval.status).toBe('approved');
    const events = await pollUntilTerminal(stack.url, taskId);
    expect(events.at(-1)!.event_type).toBe('task_completed');
    expect(resultOf(events)).toContain('42');

    // A session's turn asks, and the decision enqueues its continuation.
    const created = await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'wsf', approval_policy: rules });
    const sessionId = created.body.session.session_id;
    type Ev = { seq: number; event_type: string; payload: { stop_reason?: string; content?: string } };
    const turnsEnded = async (count: number): Promise<Ev[]> => {
      let log: Ev[] = [];
      await waitUntil(`${count} session turn(s) to end`, async () => {
        log = (await api.get<{ events: Ev[] }>(`/api/sessions/${sessionId}/events?limit=1000`)).body.events;
        return log.filter((e) => e.event_type === 'turn_complete').length >= count;
      });
      return log.filter((e) => e.event_type === 'turn_complete');
    };
    await api.post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${calc('2+2')}` });
    const sessionAsk = await pendingApprovalOf(second, 'wsf', sessionId);
    expect((await api.post(`/api/approvals/${sessionAsk.approval_id}/decision`, { approved: true })).status).toBe(200);
    expect((await turnsEnded(1)).map((e) => e.payload.stop_reason)).toEqual(['end_turn']);

    // Abort with a prompt ends the asking turn and starts the prompt's.
    await api.post(`/api/sessions/${sessionId}/messages`, { content: `Sum ${calc('3+3')}` });
    await pendingApprovalOf(second, 'wsf', sessionId);
    expect((await api.post(`/api/sessions/${sessionId}/abort`, { prompt: { content: 'Say hi' } })).status).toBe(200);
    expect((await turnsEnded(3)).map((e) => e.payload.stop_reason)).toEqual(['end_turn', 'cancelled', 'end_turn']);

    // A task's cancel cancels its approval and answers 200.
    const cancelled = await startTask('wsf', TEST_API_KEY, [calc('7*7')], { task: rules });
    const cancelledAsk = await requestedAfter(cancelled);
    expect((await api.post(`/api/tasks/${cancelled}/cancel`, { reason: 'enough' })).status).toBe(200);
    expect((await api.get<{ approval: Approval }>(`/api/approvals/${cancelledAsk.payload.approval_id}`)).body.approval.status).toBe('cancelled');
  });
});

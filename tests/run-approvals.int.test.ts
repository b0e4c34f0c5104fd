import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpClient, runsCall, waitUntil } from '@cadre/testing';
import { TestStack } from './support/stack.ts';

// Approvals of VM runs: the vm-agent (a real OS process) runs the agent loop and its shell on the "VM"; before a
// turn's tools run it asks the gateway, and an `ask` waits on the VM, polling, until decided over HTTP.
const KEY = 'key-run-approvals-ws-0123456789';
const OTHER_KEY = 'key-run-approvals-other-012345';
const RUNS_KEY = 'run-approvals-runs-key-0123456789';
const CONTROL_KEY = 'run-approvals-control-key-012345';
const WS = 'vmapprovals';

interface RunEvent {
  seq: number;
  event_type: string;
  payload: Record<string, unknown>;
}
interface Approval {
  approval_id: string;
  status: string;
  run_id?: string;
  tool_name: string;
  arguments: string;
  decided_by?: string;
}

let stack: TestStack;
let agent: ChildProcess;
beforeAll(async () => {
  stack = await TestStack.start({
    gateways: 2,
    workers: 0,
    env: { CADRE_API_KEYS: `${WS}:${KEY},elsewhere:${OTHER_KEY}`, RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: CONTROL_KEY, RUNS_HEARTBEAT_INTERVAL_MS: '100', RUNS_WORKER_TTL_MS: '1500' },
  });
  agent = await stack.spawnVmAgent(WS, 'vm-approvals-1', { RUNS_API_KEY: RUNS_KEY });
});
afterAll(async () => {
  agent?.kill('SIGKILL');
  await stack?.stop();
});

const second = (): ReturnType<typeof httpClient> => httpClient(`http://127.0.0.1:${stack.gateways[1]!.port}`, KEY);

async function startRun(query: string): Promise<string> {
  const run = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: WS, query });
  expect(run.status).toBe(200);
  return run.body.run.run_id as string;
}

async function events(runId: string): Promise<RunEvent[]> {
  return (await runsCall(stack.url, RUNS_KEY, 'GET', `/api/runs/${runId}/events?limit=1000`)).body.events as RunEvent[];
}

async function pendingOf(runId: string): Promise<Approval> {
  let found: Approval | undefined;
  await waitUntil('the run to ask', async () => {
    found = (await second().get<{ approvals: Approval[] }>(`/api/approvals?workspace_id=${WS}&run_id=${runId}&status=pending`)).body.approvals[0];
    return found !== undefined;
  });
  return found!;
}

async function statusOf(runId: string): Promise<string> {
  return (await runsCall(stack.url, RUNS_KEY, 'GET', `/api/runs/${runId}`)).body.status as string;
}

const SHELL = '[[scripted:call=shell({"command":"echo approved-output"})]]';

describe('tool approvals for VM runs', () => {
  beforeAll(async () => {
    const put = await httpClient(stack.url, KEY).request('PUT', `/api/workspaces/${WS}/approval-policy`, {
      rules: [{ tool: 'shell', when: { command: { glob: 'echo *' } }, action: 'ask', reason: 'echo on the VM', timeout_secs: 60 }],
    });
    expect(put.status).toBe(200);
  });

  it('an ask parks the tool call on the VM until it is approved over HTTP at another gateway; the run log shows both', async () => {
    const runId = await startRun(`Echo ${SHELL}`);
    const ask = await pendingOf(runId);
    expect(ask).toMatchObject({ run_id: runId, tool_name: 'shell', arguments: '{"command":"echo approved-output"}' });
    // Waiting: the shell has not run, and the inbox stream names the run's approval.
    expect((await events(runId)).some((e) => e.event_type === 'tool-result')).toBe(false);
    expect(await statusOf(runId)).toBe('running');

    const decided = await second().post<{ approval: Approval }>(`/api/approvals/${ask.approval_id}/decision`, { approved: true });
    expect(decided.status).toBe(200);
    expect(decided.body.approval).toMatchObject({ status: 'approved', decided_by: `workspace-key:${WS}` });
    expect((await httpClient(stack.url, KEY).post(`/api/approvals/${ask.approval_id}/decision`, { approved: false })).status).toBe(409);

    await waitUntil('the run to complete', async () => (await statusOf(runId)) === 'completed');
    const log = await events(runId);
    const types = log.map((e) => e.event_type);
    const at = (type: string): number => types.indexOf(type);
    expect(at('tool-call')).toBeLessThan(at('approval-requested'));
    expect(at('approval-requested')).toBeLessThan(at('approval-resolved'));
    expect(at('approval-resolved')).toBeLessThan(at('tool-result'));
    expect(log.find((e) => e.event_type === 'approval-resolved')!.payload).toMatchObject({ approval_id: ask.approval_id, approved: true, status: 'approved' });
    expect(JSON.stringify(log.find((e) => e.event_type === 'tool-result')!.payload)).toContain('approved-output');
  });

  it('a denial reaches the model as a tool error with the reason; a call the rule does not match runs at once', async () => {
    const runId = await startRun(`Echo ${SHELL}`);
    const ask = await pendingOf(runId);
    expect((await second().post(`/api/approvals/${ask.approval_id}/decision`, { approved: false, reason: 'not on this VM' })).status).toBe(200);
    await waitUntil('the run to complete', async () => (await statusOf(runId)) === 'completed');
    const log = await events(runId);
    expect(log.some((e) => e.event_type === 'tool-result')).toBe(false);
    expect(JSON.stringify(log.find((e) => e.event_type === 'assistant-message')!.payload)).toContain('denied: not on this VM');

    const free = await startRun('List [[scripted:call=shell({"command":"ls"})]]');
    await waitUntil('the unmatched run to complete', async () => (await statusOf(free)) === 'completed');
    expect((await events(free)).some((e) => e.event_type.startsWith('approval-'))).toBe(false);
  });

  it('a modifier amends the call on the VM: checked against the schema the vm-agent sent, and the agent runs the amended command', async () => {
    const runId = await startRun(`Echo ${SHELL}`);
    const ask = await pendingOf(runId);
    expect(JSON.parse((ask as Approval & { parameters_schema: string }).parameters_schema)).toMatchObject({ required: ['command'] });
    const refused = await second().post<{ error: { message: string } }>(`/api/approvals/${ask.approval_id}/decision`, { approved: true, modifier: { command: 'echo x', extra: 1 } });
    expect(refused.status).toBe(400);
    expect(refused.body.error.message).toContain("modifier does not fit shell's arguments");
    expect((await second().get<{ approval: Approval }>(`/api/approvals/${ask.approval_id}`)).body.approval.status).toBe('pending');

    const decided = await second().post<{ approval: Approval & { modifier?: string } }>(`/api/approvals/${ask.approval_id}/decision`, { approved: true, modifier: { command: 'echo amended-output' } });
    expect(decided.status).toBe(200);
    expect(decided.body.approval).toMatchObject({ status: 'approved', arguments: '{"command":"echo approved-output"}', modifier: '{"command":"echo amended-output"}' });
    await waitUntil('the run to complete', async () => (await statusOf(runId)) === 'completed');
    const log = await events(runId);
    expect(log.find((e) => e.event_type === 'approval-resolved')!.payload).toMatchObject({ approved: true, modifier: '{"command":"echo amended-output"}' });
    const result = JSON.stringify(log.find((e) => e.event_type === 'tool-result')!.payload);
    expect(result).toContain('amended-output');
    expect(result).not.toContain('approved-output');
  });

  it('an agent that sends no parameter schema (an older vm-agent) gets approvals without modifiers: a modifier is 400', async () => {
    // A raw client in the vm-agent's place, in a workspace of its own so the real agent does not take the run.
    const ws = 'vmapprovals-old';
    expect((await httpClient(stack.url).request('PUT', `/api/workspaces/${ws}/approval-policy`, { rules: [{ tool: 'shell', action: 'ask' }] })).status).toBe(200);
    const run = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: ws, query: 'old agent' });
    const hb = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/workers/heartbeat', { workspace_id: ws, worker_id: 'old-agent', status: 'ready', metadata: {} });
    const assigned = hb.body.assigned_run as { run_id: string; lease_id: string };
    expect(assigned.run_id).toBe(run.body.run.run_id);
    const proposed = await runsCall(stack.url, RUNS_KEY, 'POST', `/api/runs/${assigned.run_id}/approvals`, {
      worker_id: 'old-agent', lease_id: assigned.lease_id, calls: [{ call_id: 'c1', tool_name: 'shell', arguments: '{"command":"ls"}' }],
    });
    const verdict = (proposed.body.verdicts as { action: string; approval_id: string }[])[0]!;
    expect(verdict.action).toBe('ask');
    const refused = await httpClient(stack.url).post<{ error: { message: string } }>(`/api/approvals/${verdict.approval_id}/decision`, { approved: true, modifier: { command: 'pwd' } });
    expect(refused.status).toBe(400);
    expect(refused.body.error.message).toContain('the vm-agent sent none');
    // A schema that is not one is refused when proposed, and nothing is asked.
    const bad = await runsCall(stack.url, RUNS_KEY, 'POST', `/api/runs/${assigned.run_id}/approvals`, {
      worker_id: 'old-agent', lease_id: assigned.lease_id, calls: [{ call_id: 'c2', tool_name: 'shell', arguments: '{}', parameters_schema: { type: 'nonsense' } }],
    });
    expect(bad.status).toBe(400);
    expect((await httpClient(stack.url).get<{ approvals: Approval[] }>(`/api/approvals?workspace_id=${ws}&run_id=${assigned.run_id}`)).body.approvals).toHaveLength(1);
  });

  it('stop-all cancels a run\'s pending approval; another workspace\'s key sees 404; a modifier the schema refuses or task scope is 400', async () => {
    const runId = await startRun(`Echo ${SHELL}`);
    const ask = await pendingOf(runId);
    const other = httpClient(stack.url, OTHER_KEY);
    expect((await other.get(`/api/approvals/${ask.approval_id}`)).status).toBe(404);
    expect((await other.post(`/api/approvals/${ask.approval_id}/decision`, { approved: true })).status).toBe(404);
    expect((await second().post(`/api/approvals/${ask.approval_id}/decision`, { approved: true, modifier: { command: '' } })).status).toBe(400);
    expect((await second().post(`/api/approvals/${ask.approval_id}/decision`, { approved: true, scope: 'task' })).status).toBe(400);
    expect((await second().get<{ approval: Approval }>(`/api/approvals/${ask.approval_id}`)).body.approval.status).toBe('pending');

    const stopped = await runsCall(stack.url, CONTROL_KEY, 'POST', '/api/runs/stop-all', { workspace_id: WS }, { 'x-windie-runs-control-key': CONTROL_KEY });
    expect(stopped.status).toBe(200);
    expect((await second().get<{ approval: Approval }>(`/api/approvals/${ask.approval_id}`)).body.approval.status).toBe('cancelled');
    expect((await second().post(`/api/approvals/${ask.approval_id}/decision`, { approved: true })).status).toBe(409);
    const resolved = (await events(runId)).find((e) => e.event_type === 'approval-resolved');
    expect(resolved?.payload).toMatchObject({ approval_id: ask.approval_id, approved: false, status: 'cancelled' });
  });

  it('an approval nobody decides expires at its deadline and the model is told', async () => {
    const put = await httpClient(stack.url, KEY).request('PUT', `/api/workspaces/${WS}/approval-policy`, { rules: [{ tool: 'shell', action: 'ask', timeout_secs: 1 }] });
    expect(put.status).toBe(200);
    const runId = await startRun(`Echo ${SHELL}`);
    await waitUntil('the run to complete', async () => (await statusOf(runId)) === 'completed');
    const log = await events(runId);
    expect(log.find((e) => e.event_type === 'approval-resolved')!.payload).toMatchObject({ approved: false, status: 'expired', reason: 'approval timed out' });
    expect(JSON.stringify(log.find((e) => e.event_type === 'assistant-message')!.payload)).toContain('approval timed out');
  });

  it('kill -9 of the vm-agent while its call waits: the lost lease cancels the approval, and the next agent asks again', async () => {
    const put = await httpClient(stack.url, KEY).request('PUT', `/api/workspaces/${WS}/approval-policy`, { rules: [{ tool: 'shell', action: 'ask' }] });
    expect(put.status).toBe(200);
    const runId = await startRun(`Echo ${SHELL}`);
    const lost = await pendingOf(runId);
    agent.kill('SIGKILL');
    await waitUntil('the lost lease to cancel the approval', async () => (await second().get<{ approval: Approval }>(`/api/approvals/${lost.approval_id}`)).body.approval.status === 'cancelled');
    agent = await stack.spawnVmAgent(WS, 'vm-approvals-2', { RUNS_API_KEY: RUNS_KEY });
    let again: Approval | undefined;
    await waitUntil('the next agent to ask again', async () => {
      again = (await second().get<{ approvals: Approval[] }>(`/api/approvals?workspace_id=${WS}&run_id=${runId}&status=pending`)).body.approvals[0];
      return again !== undefined;
    });
    expect(again!.approval_id).not.toBe(lost.approval_id);
    expect((await second().post(`/api/approvals/${again!.approval_id}/decision`, { approved: true })).status).toBe(200);
    await waitUntil('the run to complete', async () => (await statusOf(runId)) === 'completed');
    const log = await events(runId);
    const resolved = log.filter((e) => e.event_type === 'approval-resolved').map((e) => [e.payload.approval_id, e.payload.status]);
    expect(resolved).toEqual([[lost.approval_id, 'cancelled'], [again!.approval_id, 'approved']]);
    expect(log.map((e) => e.event_type)).toContain('run-worker-lost');
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runsCall, waitUntil } from '@cadre/testing';
import { TestStack } from './support/stack.ts';

// Real vm-agent processes against a real gateway: a VM that dies mid-run loses its lease and another VM finishes.
const RUNS_KEY = 'fleet-key';
let stack: TestStack;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 0, env: { RUNS_API_KEY: RUNS_KEY, RUNS_HEARTBEAT_INTERVAL_MS: '100', RUNS_WORKER_TTL_MS: '1000' } });
});
afterAll(async () => {
  await stack?.stop();
});

const call = (method: string, path: string, body?: unknown) => runsCall(stack.url, RUNS_KEY, method, path, body);

async function waitForLog(runId: string, pred: (types: string[]) => boolean): Promise<any[]> {
  return waitUntil(`run ${runId}'s log to match`, async () => {
    const events = (await call('GET', `/api/runs/${runId}/events?limit=1000`)).body.events as any[];
    return pred(events.map((e) => e.event_type)) ? events : null;
  });
}

describe('VM fleet', () => {
  it('reassigns the run of a kill -9ed vm-agent to another agent, which completes it', async () => {
    const first = await stack.spawnVmAgent('fleet', 'vm-a');
    const created = await call('POST', '/api/runs/', { workspace_id: 'fleet', agent_id: 'a', query: 'Slow work [[scripted:call=shell({"command":"sleep 2; echo done"})]]' });
    const runId = created.body.run.run_id;
    await waitForLog(runId, (t) => t.includes('tool-call'));
    first.kill('SIGKILL');
    const second = await stack.spawnVmAgent('fleet', 'vm-b');
    try {
      const events = await waitForLog(runId, (t) => t.includes('streaming-complete'));
      expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
      const server = events.filter((e) => e.source === 'backend' || e.source === 'api').map((e) => e.event_type);
      expect(server).toEqual(['run-created', 'run-worker-assigned', 'run-worker-lost', 'run-requeued', 'run-worker-assigned']);
      const assigned = events.filter((e) => e.event_type === 'run-worker-assigned').map((e) => e.payload.worker_id);
      expect(assigned).toEqual(['vm-a', 'vm-b']);
      expect(events.find((e) => e.event_type === 'run-worker-lost').payload).toMatchObject({ worker_id: 'vm-a', attempts: 1 });
      // Everything after the requeue came from vm-b's attempt, and it completed the run.
      const requeued = events.findIndex((e) => e.event_type === 'run-requeued');
      expect(events.slice(requeued + 1).filter((e) => e.event_type === 'run-dispatched').map((e) => e.payload.worker_id)).toEqual(['vm-b']);
      expect(events.at(-1).event_type).toBe('streaming-complete');
      expect((await call('GET', `/api/runs/${runId}`)).body).toMatchObject({ status: 'completed', worker: expect.objectContaining({ worker_id: 'vm-b' }), attempts: 1 });
    } finally {
      second.kill('SIGKILL');
    }
  });

  it('hands the run of a vm-agent stopped with SIGTERM mid-run to another agent, which completes it; nothing lost', async () => {
    const first = await stack.spawnVmAgent('fleet-term', 'vm-c', { VM_AGENT_SHUTDOWN_GRACE_MS: '200' });
    const created = await call('POST', '/api/runs/', { workspace_id: 'fleet-term', agent_id: 'a', query: 'Slow work [[scripted:call=shell({"command":"sleep 2; echo done"})]]' });
    const runId = created.body.run.run_id;
    await waitForLog(runId, (t) => t.includes('tool-call'));
    const exited = new Promise<number | null>((resolve) => first.once('exit', resolve));
    first.kill('SIGTERM');
    expect(await exited).toBe(0);
    const second = await stack.spawnVmAgent('fleet-term', 'vm-d');
    try {
      const events = await waitForLog(runId, (t) => t.includes('streaming-complete'));
      expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
      const server = events.filter((e) => e.source === 'backend' || e.source === 'api').map((e) => e.event_type);
      expect(server).toEqual(['run-created', 'run-worker-assigned', 'run-worker-lost', 'run-requeued', 'run-worker-assigned']);
      expect(events.filter((e) => e.event_type === 'run-worker-assigned').map((e) => e.payload.worker_id)).toEqual(['vm-c', 'vm-d']);
      // The draining agent wrote no failure: the run was handed back, not failed, and vm-d's attempt completed it.
      expect(events.map((e) => e.event_type)).not.toContain('error');
      expect(events.at(-1).event_type).toBe('streaming-complete');
      expect((await call('GET', `/api/runs/${runId}`)).body).toMatchObject({ status: 'completed', worker: expect.objectContaining({ worker_id: 'vm-d' }) });
    } finally {
      second.kill('SIGKILL');
    }
  });
});

import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runsCall, waitUntil } from '@cadre/testing';
import { KeyBuilder } from '@cadre/store';
import { connectGatewayRedis } from '../apps/gateway/src/redis-connections.ts';
import { TestStack } from './support/stack.ts';

const RUNS_KEY = 'runs-test-key';
let stack: TestStack;

// Leases of the default length (30 s): a slow machine between two steps of a test must not lose a worker's run.
// The test of lost leases has a stack of its own with short ones.
beforeAll(async () => {
  stack = await TestStack.start({ workers: 0, env: { RUNS_API_KEY: RUNS_KEY, RUNS_HEARTBEAT_INTERVAL_MS: '100' } });
});
afterAll(async () => {
  await stack?.stop();
});

/** A seed-style VM worker: plain HTTP with the original's header, as a client written for WindieOS would. */
const call = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => runsCall(stack.url, RUNS_KEY, method, path, body, headers);

describe('runs API: the original contract', () => {
  it('walks a run through create, heartbeat assignment, dispatch, relayed events and completion', async () => {
    const created = await call('POST', '/api/runs/', { workspace_id: 'ws-a', agent_id: 'agent-alpha', query: 'apply this internship job for me', requested_by: 'user_123', files: [], metadata: {} });
    expect(created.status).toBe(200);
    const run = created.body.run;
    expect(run).toMatchObject({ status: 'awaiting_worker', control_mode: 'agent_only', conversation_ref: `run-${run.run_id}` });
    expect(created.body.events.map((e: any) => [e.seq, e.event_type])).toEqual([[1, 'run-created']]);

    expect((await call('POST', '/api/runs/', { workspace_id: 'ws-a', query: 'second' })).status).toBe(409);

    const hb = await call('POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-a', worker_id: 'worker-1', vm_id: 'vm-1', user_id: 'vm-user-1', session_id: 'session-1', status: 'ready', metadata: {} });
    expect(hb.status).toBe(200);
    expect(hb.body.worker).toMatchObject({ worker_id: 'worker-1', workspace_id: 'ws-a', status: 'ready' });
    expect(hb.body.assigned_run).toMatchObject({ run_id: run.run_id, query: 'apply this internship job for me', conversation_ref: `run-${run.run_id}`, control_mode: 'agent_only' });
    expect(hb.body.control_commands).toEqual([]);
    expect((await call('GET', `/api/runs/${run.run_id}`)).body.status).toBe('queued');

    const dispatched = await call('POST', `/api/runs/${run.run_id}/worker-dispatched`, { worker_id: 'worker-1', user_id: 'vm-user-1', turn_ref: 'turn-1', conversation_ref: `run-${run.run_id}` });
    expect(dispatched.status).toBe(200);
    expect(dispatched.body.run).toMatchObject({ status: 'running', query_message_id: 'turn-1' });

    expect((await call('POST', `/api/runs/${run.run_id}/events`, { event_type: 'tool-call', source: 'worker-stream', payload: { payload: {}, turn_ref: 'turn-1' } })).status).toBe(200);
    const done = await call('POST', `/api/runs/${run.run_id}/events`, { event_type: 'streaming-complete', source: 'worker-stream', payload: {} });
    expect(done.status).toBe(200);
    expect(done.body.run.status).toBe('completed');

    const events = await call('GET', `/api/runs/${run.run_id}/events?after_seq=2&limit=200`);
    expect(events.body.events.map((e: any) => [e.seq, e.event_type, e.source])).toEqual([
      [3, 'run-dispatched', 'worker'],
      [4, 'tool-call', 'worker-stream'],
      [5, 'streaming-complete', 'worker-stream'],
    ]);
    expect(events.body.next_after_seq).toBe(5);
    // A finished run refuses control; a late relayed event is recorded and the run stays completed.
    expect((await call('POST', `/api/runs/${run.run_id}/control`, { action: 'pause' })).status).toBe(409);
    expect((await call('POST', `/api/runs/${run.run_id}/events`, { event_type: 'tool-call', payload: {} })).body.run).toMatchObject({ status: 'completed', last_event_seq: 6 });
    expect((await call('GET', `/api/runs/${run.run_id}`)).body).toMatchObject({ status: 'completed', last_event_seq: 6 });
    // What is left in Redis: the finished run's keys, its index entry included, expire after the retention.
    const redis = stack.redis.connect();
    try {
      const keys = new KeyBuilder(stack.prefix);
      for (const key of [keys.runIndex(run.run_id), keys.run('ws-a', run.run_id).meta, keys.run('ws-a', run.run_id).events]) {
        expect(await redis.ttl(key)).toBeGreaterThan(6 * 24 * 3600);
      }
      expect(await redis.sismember(keys.workspaceRuns('ws-a').active, run.run_id)).toBe(0);
    } finally {
      redis.disconnect();
    }
  });

  it('delivers controls once to legacy workers, and redelivers until acked to acking workers', async () => {
    const { body } = await call('POST', '/api/runs/', { workspace_id: 'ws-b', query: 'work' });
    const runId = body.run.run_id;
    expect((await call('POST', `/api/runs/${runId}/control`, { action: 'set-control-mode' })).status).toBe(422);
    await call('POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-b', worker_id: 'w', status: 'ready', acked_command_ids: [] });
    await call('POST', `/api/runs/${runId}/worker-dispatched`, { worker_id: 'w' });
    expect((await call('POST', `/api/runs/${runId}/control`, { action: 'pause', requested_by: 'u' })).body.run.status).toBe('paused');
    expect((await call('POST', `/api/runs/${runId}/control`, { action: 'pause' })).status).toBe(409);
    const first = await call('POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-b', worker_id: 'w', status: 'running', acked_command_ids: [] });
    expect(first.body.control_commands.map((c: any) => c.action)).toEqual(['pause']);
    // The response was "lost": the same command comes again until acked.
    const again = await call('POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-b', worker_id: 'w', status: 'running', acked_command_ids: [] });
    expect(again.body.control_commands.map((c: any) => c.command_id)).toEqual(first.body.control_commands.map((c: any) => c.command_id));
    const acked = await call('POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-b', worker_id: 'w', status: 'running', acked_command_ids: [first.body.control_commands[0].command_id] });
    expect(acked.body.control_commands).toEqual([]);

    expect((await call('POST', `/api/runs/${runId}/control`, { action: 'resume' })).body.run.status).toBe('running');
    const legacy = await call('POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-b', worker_id: 'w', status: 'running' });
    expect(legacy.body.control_commands.map((c: any) => c.action)).toEqual(['resume']);
    const legacyAgain = await call('POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-b', worker_id: 'w', status: 'running' });
    expect(legacyAgain.body.control_commands).toEqual([]);
  });

  it('requeues the run of a worker that stopped heartbeating, fences the lost worker, and fails after max attempts', async () => {
    // Leases long enough for a loaded machine's few steps between an assignment and the checks that follow it.
    const leases = await TestStack.start({ workers: 0, env: { RUNS_API_KEY: RUNS_KEY, RUNS_WORKER_TTL_MS: '1500', RUNS_HEARTBEAT_INTERVAL_MS: '100' } });
    const call = (method: string, path: string, body?: unknown) => runsCall(leases.url, RUNS_KEY, method, path, body);
    try {
      const { body } = await call('POST', '/api/runs/', { workspace_id: 'ws-c', query: 'lease me' });
      const runId = body.run.run_id;
      const a = await call('POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-c', worker_id: 'a', status: 'ready' });
      expect(a.body.assigned_run.run_id).toBe(runId);
      // Worker a goes quiet past RUNS_WORKER_TTL_MS (1.5 s); the sweeper requeues its run.
      const requeued = await waitUntil('the sweeper to requeue the run', async () => {
        const run = (await call('GET', `/api/runs/${runId}`)).body;
        return run.attempts === 1 ? run : null;
      });
      expect(requeued).toMatchObject({ status: 'awaiting_worker', attempts: 1, worker: null });
      const b = await call('POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-c', worker_id: 'b', status: 'ready' });
      expect(b.body.assigned_run.run_id).toBe(runId);
      expect(b.body.assigned_run.lease_id).not.toBe(a.body.assigned_run.lease_id);
      // The lost worker can no longer dispatch or relay into the run.
      expect((await call('POST', `/api/runs/${runId}/worker-dispatched`, { worker_id: 'a' })).status).toBe(404);
      expect((await call('POST', `/api/runs/${runId}/events`, { event_type: 'tool-call', worker_id: 'a' })).status).toBe(409);
      const types = (await call('GET', `/api/runs/${runId}/events`)).body.events.map((e: any) => e.event_type);
      expect(types).toEqual(['run-created', 'run-worker-assigned', 'run-worker-lost', 'run-requeued', 'run-worker-assigned']);

      // b and then c go quiet too: the third loss (RUNS_MAX_ATTEMPTS 3) fails the run, with the reason in the log.
      await waitUntil('the run to lose b', async () => (await call('GET', `/api/runs/${runId}`)).body.attempts === 2);
      expect((await call('POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-c', worker_id: 'c', status: 'ready' })).body.assigned_run.run_id).toBe(runId);
      const failed = await waitUntil('the run to lose c and fail', async () => {
        const run = (await call('GET', `/api/runs/${runId}`)).body;
        return run.attempts === 3 ? run : null;
      });
      expect(failed).toMatchObject({ status: 'failed', attempts: 3, error: 'worker lost 3 times' });
      const last = (await call('GET', `/api/runs/${runId}/events?after_seq=7`)).body.events.map((e: any) => [e.event_type, e.payload.reason ?? null]);
      expect(last).toEqual([['run-worker-assigned', null], ['run-worker-lost', null], ['error', 'worker_lost']]);
    } finally {
      await leases.stop();
    }
  });

  it('answers 503 without a configured key and 401 with a wrong one', async () => {
    expect((await call('GET', '/api/runs/00000000-0000-4000-8000-000000000000', undefined, { 'x-windie-runs-key': 'nope' })).status).toBe(401);
    const bare = await fetch(`${stack.url}/api/runs/00000000-0000-4000-8000-000000000000`);
    expect(bare.status).toBe(401);
    expect((await call('GET', '/api/runs/00000000-0000-4000-8000-000000000000')).status).toBe(404);
    const unconfigured = await stack.addGateway({ RUNS_API_KEY: '' });
    const res = await fetch(`http://127.0.0.1:${unconfigured.port}/api/runs/workers/heartbeat`, { method: 'POST', headers: { 'x-windie-runs-key': RUNS_KEY } });
    expect(res.status).toBe(503);
  });

  it('releases the run of a worker that restarted (new session_id) instead of waiting for its lease', async () => {
    const { body } = await call('POST', '/api/runs/', { workspace_id: 'ws-d', query: 'restart me' });
    const runId = body.run.run_id;
    await call('POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-d', worker_id: 'vm', session_id: 's1', status: 'ready' });
    expect((await call('POST', `/api/runs/${runId}/worker-dispatched`, { worker_id: 'vm' })).status).toBe(200);
    // The agent process restarts with the same worker id: its first heartbeat gets the run back as a new attempt.
    const again = await call('POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-d', worker_id: 'vm', session_id: 's2', status: 'ready' });
    expect(again.body.assigned_run).toMatchObject({ run_id: runId });
    const types = (await call('GET', `/api/runs/${runId}/events`)).body.events.map((e: any) => e.event_type);
    expect(types).toEqual(['run-created', 'run-worker-assigned', 'run-dispatched', 'run-worker-lost', 'run-requeued', 'run-worker-assigned']);
    expect((await call('GET', `/api/runs/${runId}`)).body).toMatchObject({ status: 'queued', attempts: 1 });
  });

  it('stores a relayed batch once when it is retried after a lost reply (batch_id)', async () => {
    const { body } = await call('POST', '/api/runs/', { workspace_id: 'ws-e', query: 'relay twice' });
    const runId = body.run.run_id;
    await call('POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-e', worker_id: 'vm', status: 'ready' });
    await call('POST', `/api/runs/${runId}/worker-dispatched`, { worker_id: 'vm' });
    const batch = { worker_id: 'vm', batch_id: 'b-1', events: [{ event_type: 'tool-call', payload: { n: 1 } }, { event_type: 'tool-result', payload: { n: 1 } }] };
    const first = await call('POST', `/api/runs/${runId}/events`, batch);
    const retry = await call('POST', `/api/runs/${runId}/events`, batch);
    expect(first.status).toBe(200);
    expect(retry.status).toBe(200);
    expect(retry.body.last_seq).toBe(first.body.last_seq);
    const final = { worker_id: 'vm', batch_id: 'b-2', events: [{ event_type: 'streaming-complete', payload: {} }] };
    expect((await call('POST', `/api/runs/${runId}/events`, final)).status).toBe(200);
    // The final batch's retry, after the run completed, is recognised too rather than refused.
    expect((await call('POST', `/api/runs/${runId}/events`, final)).status).toBe(200);
    const types = (await call('GET', `/api/runs/${runId}/events`)).body.events.map((e: any) => e.event_type);
    expect(types).toEqual(['run-created', 'run-worker-assigned', 'run-dispatched', 'tool-call', 'tool-result', 'streaming-complete']);
  });

  it('releases a dispatched run whose acking worker reports ready (it dropped the run); original workers keep theirs', async () => {
    for (const [ws, acks, released] of [['ws-f', [], true], ['ws-g', undefined, false]] as const) {
      const { body } = await call('POST', '/api/runs/', { workspace_id: ws, query: 'drop me?' });
      const runId = body.run.run_id;
      await call('POST', '/api/runs/workers/heartbeat', { workspace_id: ws, worker_id: 'vm', status: 'ready', ...(acks && { acked_command_ids: acks }) });
      await call('POST', `/api/runs/${runId}/worker-dispatched`, { worker_id: 'vm' });
      await call('POST', '/api/runs/workers/heartbeat', { workspace_id: ws, worker_id: 'vm', status: 'ready', ...(acks && { acked_command_ids: acks }) });
      const types = (await call('GET', `/api/runs/${runId}/events`)).body.events.map((e: any) => e.event_type);
      if (released) {
        // Released and, the worker being ready, handed straight back to it as a new attempt.
        expect(types.slice(3)).toEqual(['run-worker-lost', 'run-requeued', 'run-worker-assigned']);
      } else {
        expect(types).toEqual(['run-created', 'run-worker-assigned', 'run-dispatched']);
        expect((await call('GET', `/api/runs/${runId}`)).body.status).toBe('running');
      }
    }
  });

  it('sends heartbeats over a connection of their own (cadre-gateway-heartbeats)', async () => {
    const heartbeat = async () => expect((await call('POST', '/api/runs/workers/heartbeat', { workspace_id: 'ws-conn', worker_id: 'vm', status: 'ready' })).status).toBe(200);
    await heartbeat();
    const redis = stack.redis.connect();
    try {
      await redis.ping(); // a Cluster client knows its masters once connected
      // The last command of the named connection on every node (a Cluster client has one per master). A heartbeat
      // before each look: a Cluster client's periodic CLUSTER SLOTS may be the last command on the node it picked.
      await waitUntil('the heartbeat connection to have run the heartbeat script (its function)', async () => {
        await heartbeat();
        const nodes = 'nodes' in redis ? redis.nodes('master') : [redis];
        const lists = await Promise.all(nodes.map((node) => node.client('LIST') as Promise<string>));
        const lastCommands = lists.flatMap((list) => list.split('\n')).filter((line) => line.includes(' name=cadre-gateway-heartbeats ')).map((line) => /\bcmd=(\S+)/.exec(line)?.[1]);
        return lastCommands.includes('fcall') ? true : undefined;
      }, { timeoutMs: 5_000 });
    } finally {
      redis.disconnect();
    }
  });

  it('writes each heartbeat to Redis as it is issued: the heartbeat connection does not hold it for the event loop turn\'s end, as the gateway\'s autopipelined command connection does', async () => {
    // The connections as startGateway opens them. Both get a command in one turn of the event loop, and that turn
    // does not end until Redis has run the heartbeat connection's: a synchronous redis-cli asks for it meanwhile.
    // An autopipelined connection writes its command only when the turn ends, so the other key is still missing then.
    const connections = connectGatewayRedis(stack.redis.target, () => undefined);
    const [held, sent] = ['held', 'sent'].map((name) => `{hb-probe}${name}-${process.pid}-${Date.now()}`) as [string, string];
    try {
      const { commands, heartbeats } = connections;
      // Connected to the keys' node (a Cluster client connects to a node on its first command there).
      expect(await Promise.all([commands.exists(held), heartbeats.exists(sent)])).toEqual([0, 0]);
      const replies = Promise.all([commands.set(held, '1', 'PX', 60_000), heartbeats.set(sent, '1', 'PX', 60_000)]);
      replies.catch(() => undefined); // a failed probe throws before awaiting them, and its close rejects them
      const exists = (key: string): boolean => execFileSync('redis-cli', ['-c', '-u', stack.redis.url, 'EXISTS', key], { encoding: 'utf8' }).trim() === '1';
      const giveUpAt = Date.now() + 10_000;
      while (!exists(sent)) {
        if (Date.now() > giveUpAt) throw new Error('the heartbeat connection\'s command did not reach Redis within its event loop turn');
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20); // between polls, still within the turn
      }
      expect(exists(held)).toBe(false); // the probe sees the holding where autopipelining is on
      await replies;
      expect(exists(held)).toBe(true);
    } finally {
      await Promise.all(Object.values(connections).map((c) => c.quit().catch(() => undefined)));
    }
  });
});

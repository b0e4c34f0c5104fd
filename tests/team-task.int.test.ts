import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue } from 'bullmq';
import { assertContiguous, httpClient, pollUntilTerminal, waitForEvent, waitUntil } from '@cadre/testing';
import { AGENT_QUEUE, KeyBuilder, agentJobId } from '@cadre/store';
import type { TeamEvent } from '@cadre/protocol';
import { TestStack } from './support/stack.ts';

let stack: TestStack;
beforeAll(async () => {
  stack = await TestStack.start({ workers: 1, env: { CADRE_WORKER_TIMEOUT_MS: '2000' } });
});
afterAll(async () => {
  await stack?.stop();
});

describe('a team task end to end over HTTP', () => {
  it('runs named workers in parallel, then the lead, and logs every lifecycle event in one ordered log', async () => {
    const api = httpClient(stack.url);
    const created = await api.post<{ task: { task_id: string; status: string } }>('/api/tasks', {
      workspace_id: 'demo',
      goal: 'Weigh two options',
      team: {
        workers: [
          { role: 'researcher', instructions: 'List the pros. [[scripted:call=calculate({"expression":"6*7"})]]', tools: ['calculate'] },
          { role: 'critic', instructions: 'List the cons.' },
        ],
      },
    });
    expect(created.status).toBe(201);
    expect(created.body.task.status).toBe('queued');
    const taskId = created.body.task.task_id;

    const events = await pollUntilTerminal(stack.url, taskId);
    assertContiguous(events.map((e) => e.seq));
    expect(events[0]!.event_type).toBe('task_queued');
    expect(events.at(-1)!.event_type).toBe('task_completed');

    const of = (worker: string): string[] => events.filter((e) => e.worker_id === worker).map((e) => e.event_type);
    expect(of('researcher-1')).toEqual(['worker_started', 'worker_phase', 'worker_tool_call', 'worker_phase', 'worker_completed', 'worker_exited']);
    expect(of('critic-2')).toEqual(['worker_started', 'worker_phase', 'worker_completed', 'worker_exited']);
    expect(of('lead')).toEqual(['worker_started', 'worker_phase', 'worker_completed', 'worker_exited']);
    // The lead synthesizes only after both workers have finished.
    const leadStart = events.find((e) => e.worker_id === 'lead' && e.event_type === 'worker_started')!.seq;
    for (const w of ['researcher-1', 'critic-2']) {
      expect(events.find((e) => e.worker_id === w && e.event_type === 'worker_exited')!.seq).toBeLessThan(leadStart);
    }
    const toolCall = events.find((e) => e.event_type === 'worker_tool_call') as Extract<TeamEvent, { event_type: 'worker_tool_call' }>;
    expect(toolCall.payload.tool).toBe('calculate');
    const researcherDone = events.find((e) => e.worker_id === 'researcher-1' && e.event_type === 'worker_completed') as Extract<TeamEvent, { event_type: 'worker_completed' }>;
    expect(researcherDone.payload.result).toContain('42');
    expect(researcherDone.payload.usage.total_tokens).toBeGreaterThan(0);

    const task = await api.get<{ task: Record<string, unknown> & { workers: Record<string, unknown>[] } }>(`/api/tasks/${taskId}`);
    expect(task.status).toBe(200);
    expect(task.body.task.status).toBe('completed');
    expect(task.body.task.result).toMatch(/^Scripted answer to "Team goal: Weigh two options"/);
    expect(task.body.task.last_seq).toBe(events.at(-1)!.seq);
    expect(task.body.task.workers.map((w) => [w.worker_id, w.role, w.status, w.attempt])).toEqual([
      ['lead', 'lead', 'completed', 1],
      ['researcher-1', 'researcher', 'completed', 1],
      ['critic-2', 'critic', 'completed', 1],
    ]);
    expect((task.body.task.usage as { total_tokens: number }).total_tokens).toBeGreaterThan(0);
  });

  it('lets a lead with no named workers plan and spawn them with spawn_worker', async () => {
    const api = httpClient(stack.url);
    const created = await api.post<{ task: { task_id: string } }>('/api/tasks', {
      workspace_id: 'demo',
      goal: 'Compare cats and dogs [[scripted:spawn=cat-expert,dog-expert,judge]]',
      team: { max_workers: 2 },
    });
    expect(created.status).toBe(201);
    const events = await pollUntilTerminal(stack.url, created.body.task.task_id);
    assertContiguous(events.map((e) => e.seq));
    const spawnCalls = events.filter((e) => e.event_type === 'worker_tool_call' && e.worker_id === 'lead');
    expect(spawnCalls).toHaveLength(3);
    // max_workers bounds the team: the third spawn is refused.
    const started = [...new Set(events.filter((e) => e.event_type === 'worker_started').map((e) => e.worker_id))];
    expect(started.sort()).toEqual(['cat-expert-1', 'dog-expert-2', 'lead']);
    expect(events.at(-1)!.event_type).toBe('task_completed');
    const task = await api.get<{ task: { workers: { worker_id: string; status: string }[] } }>(`/api/tasks/${created.body.task.task_id}`);
    expect(task.body.task.workers.map((w) => `${w.worker_id}:${w.status}`)).toEqual(['lead:completed', 'cat-expert-1:completed', 'dog-expert-2:completed']);
  });

  it('tells only a planning lead about spawn_worker: a lead of named workers does not have the tool', async () => {
    const api = httpClient(stack.url);
    type Created = { task: { team: { lead: { instructions: string } } } };
    const named = await api.post<Created>('/api/tasks', { workspace_id: 'demo', goal: 'Named', team: { workers: [{ role: 'researcher' }] } });
    const planned = await api.post<Created>('/api/tasks', { workspace_id: 'demo', goal: 'Planned' });
    expect(named.status).toBe(201);
    expect(planned.status).toBe(201);
    expect(named.body.task.team.lead.instructions).not.toMatch(/spawn/);
    expect(named.body.task.team.lead.instructions).toMatch(/combine their results/);
    expect(planned.body.task.team.lead.instructions).toMatch(/spawn_worker/);
  });

  it('records model failures per worker: the lead carries on with the rest, and fails the task when none is left', async () => {
    const api = httpClient(stack.url);
    const partial = await api.post<{ task: { task_id: string } }>('/api/tasks', {
      workspace_id: 'demo',
      goal: 'Partial team',
      team: { workers: [{ role: 'flaky', instructions: 'Always down. [[scripted:fail=500]]' }, { role: 'steady', instructions: 'Fine.' }] },
    });
    const events = await pollUntilTerminal(stack.url, partial.body.task.task_id);
    assertContiguous(events.map((e) => e.seq));
    const failed = events.find((e) => e.event_type === 'worker_failed') as Extract<TeamEvent, { event_type: 'worker_failed' }>;
    expect(failed.worker_id).toBe('flaky-1');
    expect(failed.payload.reason).toBe('model_error');
    expect(failed.payload.message).toMatch(/500/);
    expect(events.at(-1)!.event_type).toBe('task_completed');
    const task = await api.get<{ task: { workers: { worker_id: string; status: string; failure_reason: string | null }[] } }>(`/api/tasks/${partial.body.task.task_id}`);
    expect(task.body.task.workers.find((w) => w.worker_id === 'flaky-1')).toMatchObject({ status: 'failed', failure_reason: 'model_error' });

    const hopeless = await api.post<{ task: { task_id: string } }>('/api/tasks', {
      workspace_id: 'demo',
      goal: 'Hopeless team',
      team: { workers: [{ role: 'slow', instructions: 'Too slow. [[scripted:delay=5000]]' }] },
    });
    // CADRE_WORKER_TIMEOUT_MS is 2000 in this stack, so the slow worker times out.
    const lost = await pollUntilTerminal(stack.url, hopeless.body.task.task_id);
    const timeout = lost.find((e) => e.event_type === 'worker_failed') as Extract<TeamEvent, { event_type: 'worker_failed' }>;
    expect(timeout.payload.reason).toBe('timeout');
    const end = lost.at(-1) as Extract<TeamEvent, { event_type: 'task_failed' }>;
    expect(end.event_type).toBe('task_failed');
    expect(end.payload.reason).toMatch(/every worker failed/);
  });

  it('retries 429 and 5xx from the model with backoff and still completes', async () => {
    const before = stack.model.requestCount();
    const res = await httpClient(stack.url).post<{ task: { task_id: string } }>('/api/tasks', {
      workspace_id: 'demo',
      goal: 'Rate limited',
      team: { workers: [{ role: 'patient', instructions: 'Try again. [[scripted:fail=429*2]]' }] },
    });
    const events = await pollUntilTerminal(stack.url, res.body.task.task_id);
    expect(events.at(-1)!.event_type).toBe('task_completed');
    expect(events.some((e) => e.event_type === 'worker_failed')).toBe(false);
    // Two refused calls, the successful one, and the lead's.
    expect(stack.model.requestCount() - before).toBe(4);
  });

  it('exposes Prometheus metrics on /metrics', async () => {
    const res = await fetch(`${stack.url}/metrics`);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toMatch(/^cadre_tasks_reached_status\{status="completed",app="gateway"\} [1-9]/m);
    expect(text).toMatch(/^cadre_queue_jobs\{queue="agents",state="waiting",app="gateway"\} \d+/m);
    expect(text).toMatch(/^cadre_watchers\{app="gateway"\} 0/m);
    // Nothing is watched now, so the gateway listens on no shard channel (it subscribes only while it watches).
    expect(text).toMatch(/^cadre_fanout_channels\{app="gateway"\} 0$/m);
  });

  it('stops a running tool when the task ends without a cancel message (durable check)', async () => {
    const res = await httpClient(stack.url).post<{ task: { task_id: string } }>('/api/tasks', {
      workspace_id: 'demo',
      goal: 'Lost message',
      team: { workers: [{ role: 'sleeper', instructions: 'Sleep. [[scripted:call=wait({"ms":30000})]]', tools: ['wait'] }] },
    });
    const taskId = res.body.task.task_id;
    await waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_tool_call');
    // As if the cancel's pub/sub message had been lost: the task is cancelled in Redis with no message sent.
    const redis = stack.redis.connect();
    try {
      await redis.hset(new KeyBuilder(stack.prefix).task(taskId).meta, 'status', 'cancelled');
      const queue = new Queue(AGENT_QUEUE, { connection: redis, prefix: new KeyBuilder(stack.prefix).bullPrefix() });
      // The tool waits 30 s; the job ends well before that only if the durable check aborted it. (How soon after
      // the status change, about a second, is not asserted here.)
      const job = await waitUntil('the sleeper\'s job to end', async () => {
        const found = await queue.getJob(agentJobId(taskId, 'sleeper-1'));
        return found?.finishedOn !== undefined ? found : null;
      });
      expect(job.finishedOn! - job.processedOn!).toBeLessThan(30_000);
      await queue.close();
    } finally {
      redis.disconnect();
    }
  });
});


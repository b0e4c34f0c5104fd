// A parked turn moves on when its client never answers only through a deadline: the deadline job must not lose it
// to a write Redis refused, and an approved call's deadline must not be lost between the decision and its job.
import { randomUUID } from 'node:crypto';
import type { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deadlineJobId } from '@cadre/session';
import { KeyBuilder, SessionStore } from '@cadre/store';
import { httpClient, waitUntil, type TestRedisClient } from '@cadre/testing';
import { refuseWritesForMemory, startAdminStack, type AdminStack } from './support/redis-memory.ts';
import { sessionEventsWhen, type SessionLogEvent } from './support/session-client.ts';
import type { TestStack } from './support/stack.ts';

let started: AdminStack;
let stack: TestStack;
let admin: TestRedisClient;
let queue: Queue;

beforeAll(async () => {
  // The enqueue sweeper looks at marks older than 400 ms (a process that died mid-change).
  started = await startAdminStack({ env: { CADRE_ENQUEUE_GRACE_MS: '400' } });
  ({ stack, admin, queue } = started);
});
afterAll(async () => {
  await started?.stop();
});

const api = () => httpClient(stack.url);
const turnEnded = (evs: SessionLogEvent[]): boolean => evs.some((e) => e.event_type === 'turn_complete');

/** A session whose turn asked its client tool `ask_user` (timeout `timeoutMs`): the event that asked, once logged. */
async function askingSession(timeoutMs: number, policy?: object): Promise<{ id: string; asked: SessionLogEvent }> {
  const created = await api().post<{ session: { session_id: string } }>('/api/sessions', {
    workspace_id: 'deadlines', tools: [{ name: 'ask_user', timeout_ms: timeoutMs }], ...(policy && { approval_policy: policy }),
  });
  const id = created.body.session.session_id;
  await api().post(`/api/sessions/${id}/messages`, { content: 'Ask [[scripted:call=ask_user({"q":"ok?"})]]' });
  const kind = policy ? 'approval_requested' : 'tool_request';
  const evs = await sessionEventsWhen(stack.url, id, (all) => all.some((e) => e.event_type === kind));
  await waitUntil('the turn to park', async () => (await api().get<{ session: { status: string } }>(`/api/sessions/${id}`)).body.session.status === 'waiting_tool');
  return { id, asked: evs.find((e) => e.event_type === kind)! };
}

describe('a tool deadline job whose write Redis refuses', () => {
  it('fails and is tried again with backoff, and the call still times out', async () => {
    const { id, asked } = await askingSession(1_500);
    const jobId = deadlineJobId(id, asked.payload.tool_call_id as string);
    // Out of memory (maxmemory below what is used, noeviction) when the deadline comes.
    const oom = await refuseWritesForMemory(admin);
    try {
      await waitUntil('the deadline job to run', async () => {
        const job = await queue.getJob(jobId);
        return job !== undefined && (job.attemptsMade > 0 || job.finishedOn !== undefined);
      });
      const job = (await queue.getJob(jobId))!;
      expect({ attemptsMade: job.attemptsMade, failedReason: job.failedReason, finished: job.finishedOn !== undefined })
        .toEqual({ attemptsMade: 1, failedReason: expect.stringMatching(/^OOM /), finished: false });
    } finally {
      await oom.restore();
    }
    const evs = await sessionEventsWhen(stack.url, id, turnEnded);
    expect(evs.find((e) => e.event_type === 'tool_result')!.payload).toMatchObject({ tool_name: 'ask_user', success: false, timed_out: true });
    expect(evs.find((e) => e.event_type === 'turn_complete')!.payload.stop_reason).toBe('end_turn');
  }, 60_000);
});

describe('an approved client call whose gateway died right after the decision', () => {
  it('still gets its deadline: the enqueue sweeper arms it', async () => {
    const { id, asked } = await askingSession(500, { rules: [{ tool: 'ask_user', action: 'ask', timeout_secs: 3600 }] });
    // What a gateway that died between the decision's script and its next step leaves: the mark and the decision.
    const store = new SessionStore({ redis: admin, keys: new KeyBuilder(stack.prefix), idleTtlSec: 3600, retentionSec: 3600 });
    await store.markEnqueueing(`${id} ${randomUUID()}`);
    await store.decideApproval(id, asked.payload.approval_id as string, 'approved', '', 'tester');

    const evs = await sessionEventsWhen(stack.url, id, turnEnded);
    expect(evs.find((e) => e.event_type === 'tool_result')!.payload).toMatchObject({ tool_name: 'ask_user', success: false, timed_out: true });
  }, 30_000);
});

// A turn job that fails with an error the worker has no answer for (here: Redis refusing writes for want of memory,
// which is no outage to ride out) ends its turn in a retryable error instead of leaving the session running for good.
import type { Queue } from 'bullmq';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpClient, waitUntil, type TestRedisClient } from '@cadre/testing';
import { oomErrors, refuseWritesForMemory, startAdminStack, type AdminStack } from './support/redis-memory.ts';
import { sessionEventsWhen } from './support/session-client.ts';
import type { TestStack } from './support/stack.ts';

let started: AdminStack;
let stack: TestStack;
let admin: TestRedisClient;
let queue: Queue;
const workerLog: Array<{ msg: string; err?: { message?: string } }> = [];

beforeAll(async () => {
  started = await startAdminStack({ workers: 0 });
  ({ stack, admin, queue } = started);
  const logger = pino({ level: 'warn' }, { write: (line: string) => void workerLog.push(JSON.parse(line)) });
  await stack.addWorkerPool({}, logger);
});
afterAll(async () => {
  await started?.stop();
});

describe('a turn job that fails with an unexpected error', () => {
  it('ends the turn in a retryable internal_error, and the session takes the next message', async () => {
    const api = httpClient(stack.url);
    const id = (await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'fail' })).body.session.session_id;
    await api.post(`/api/sessions/${id}/messages`, { content: 'Explain slowly [[scripted:words=400]] [[scripted:chunk_delay=20]]' });
    await sessionEventsWhen(stack.url, id, (evs) => evs.some((e) => e.event_type === 'text_delta'));
    const oom = await refuseWritesForMemory(admin);
    await waitUntil('the turn job to fail', async () => (await queue.getFailedCount()) === 1);
    expect(workerLog.find((l) => l.msg === 'session turn failed')?.err?.message).toMatch(/^OOM /);
    // Meanwhile the API answers what Redis refuses for want of memory as "unavailable, retry", not as a 500.
    expect(await api.post('/api/sessions', { workspace_id: 'fail' })).toEqual({
      status: 503,
      body: { error: { code: 'unavailable', message: 'the store is out of memory for the moment (Redis reached its maxmemory); retry later' } },
    });
    // Redis refuses the turn's ending too while it is still out of memory: the worker tries it again once it is not.
    const refused = await oomErrors(admin);
    await waitUntil('a write refused after the job failed (the turn\'s ending)', async () => (await oomErrors(admin)) > refused);
    await oom.restore();

    const evs = await sessionEventsWhen(stack.url, id, (all) => all.some((e) => e.event_type === 'turn_complete'));
    expect(evs.filter((e) => e.event_type === 'session_error').map((e) => e.payload)).toEqual([
      { code: 'internal_error', message: expect.any(String), retryable: true },
    ]);
    expect(evs.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['error']);
    await waitUntil('the session to be idle', async () => (await api.get<{ session: { status: string } }>(`/api/sessions/${id}`)).body.session.status === 'idle');

    // Usable again: the next message is a new turn (not turn_in_progress), answered to its end.
    expect((await api.post(`/api/sessions/${id}/messages`, { content: 'Again, briefly' })).status).toBe(202);
    const after = await sessionEventsWhen(stack.url, id, (all) => all.filter((e) => e.event_type === 'turn_complete').length === 2);
    expect(after.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['error', 'end_turn']);
  }, 60_000);
});

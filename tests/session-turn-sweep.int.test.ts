// A turn job that failed for good, on a worker that exited before Redis would take the turn's ending: no worker is
// left to write it, yet the next worker pool's turn sweep ends the turn — and leaves alone a session whose failed
// turn was ended meanwhile, or which has a newer turn running.
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import type { Queue } from 'bullmq';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpClient, waitUntil, type TestRedisClient } from '@cadre/testing';
import { oomErrors, refuseWritesForMemory, startAdminStack, type AdminStack } from './support/redis-memory.ts';
import { sessionEvents, sessionEventsWhen } from './support/session-client.ts';
import type { TestStack } from './support/stack.ts';

let started: AdminStack;
let stack: TestStack;
let admin: TestRedisClient;
let queue: Queue;
const poolLog: Array<{ msg: string; time: number; sessionId?: string; code?: string }> = [];

beforeAll(async () => {
  started = await startAdminStack({ workers: 0 });
  ({ stack, admin, queue } = started);
});
afterAll(async () => {
  await started?.stop();
});

const SLOW = 'Explain slowly [[scripted:words=400]] [[scripted:chunk_delay=20]]';
/** Long enough for a few sweep passes while it streams. */
const SLOWER = 'Explain very slowly [[scripted:words=200]] [[scripted:chunk_delay=50]]';

describe('the turn sweep', () => {
  it('ends a turn whose job failed for good and whose worker exited before writing its end; ended and newer turns stay', async () => {
    const api = httpClient(stack.url);
    const status = async (id: string): Promise<string> => (await api.get<{ session: { status: string } }>(`/api/sessions/${id}`)).body.session.status;
    const open = async (): Promise<string> => (await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'sweep' })).body.session.session_id;
    // stranded: nobody ends its turn but the sweep. cancelled: its failed turn is ended by a cancel. renewed: the
    // same, and a newer turn is running when the sweep looks.
    const [stranded, cancelled, renewed] = [await open(), await open(), await open()];

    const worker: ChildProcess = await stack.spawnWorkerProcess();
    for (const id of [stranded, cancelled, renewed]) expect((await api.post(`/api/sessions/${id}/messages`, { content: SLOW })).status).toBe(202);
    for (const id of [stranded, cancelled, renewed]) await sessionEventsWhen(stack.url, id, (evs) => evs.some((e) => e.event_type === 'text_delta'));
    const oom = await refuseWritesForMemory(admin);
    await waitUntil('the three turn jobs to fail', async () => (await queue.getFailedCount()) === 3);
    // The worker tries to end the turns, and Redis refuses; it exits before Redis takes writes again.
    const refused = await oomErrors(admin);
    await waitUntil('a write refused after the jobs failed (a turn\'s ending)', async () => (await oomErrors(admin)) > refused);
    worker.kill('SIGKILL');
    if (worker.exitCode === null && worker.signalCode === null) await once(worker, 'exit');
    await oom.restore();

    expect((await api.post(`/api/sessions/${cancelled}/cancel`, {})).status).toBe(200);
    expect((await api.post(`/api/sessions/${renewed}/cancel`, {})).status).toBe(200);
    expect((await api.post(`/api/sessions/${renewed}/messages`, { content: SLOWER })).status).toBe(202);
    expect(await status(stranded)).toBe('running');
    const cancelledEvents = await sessionEvents(stack.url, cancelled);

    const logger = pino({ level: 'debug' }, { write: (line: string) => void poolLog.push(JSON.parse(line)) });
    await stack.addWorkerPool({ CADRE_TURN_SWEEP_INTERVAL_MS: '200' }, logger);

    // A whole pass runs while the renewed session's newer turn streams: that turn is not the failed job's, and goes on.
    await sessionEventsWhen(stack.url, renewed, (all) => {
      const cancelledAt = all.findIndex((e) => e.event_type === 'turn_complete');
      return cancelledAt >= 0 && all.slice(cancelledAt).some((e) => e.event_type === 'text_delta');
    });
    const streaming = Date.now();
    // Passes are chained: the second to end after this began after it.
    await waitUntil('a sweep pass begun after the newer turn streamed', () => poolLog.filter((l) => l.msg === 'turn sweep pass' && l.time > streaming).length >= 2);
    expect(await status(renewed)).toBe('running');
    const renewedEvents = await sessionEventsWhen(stack.url, renewed, (all) => all.filter((e) => e.event_type === 'turn_complete').length === 2, 30_000);
    expect(renewedEvents.filter((e) => e.event_type === 'session_error')).toEqual([]);
    expect(renewedEvents.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['cancelled', 'end_turn']);

    // The stranded turn ends as its worker would have ended it, and the session takes the next message.
    const evs = await sessionEventsWhen(stack.url, stranded, (all) => all.some((e) => e.event_type === 'turn_complete'));
    expect(evs.filter((e) => e.event_type === 'session_error').map((e) => e.payload)).toEqual([
      { code: 'internal_error', message: expect.any(String), retryable: true },
    ]);
    expect(evs.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['error']);
    await waitUntil('the stranded session to be idle', async () => (await status(stranded)) === 'idle');
    expect((await api.post(`/api/sessions/${stranded}/messages`, { content: 'Again, briefly' })).status).toBe(202);
    const after = await sessionEventsWhen(stack.url, stranded, (all) => all.filter((e) => e.event_type === 'turn_complete').length === 2);
    expect(after.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['error', 'end_turn']);

    // The sweep ended that one turn, and nothing of the session whose failed turn a cancel had ended.
    expect(poolLog.filter((l) => l.msg.startsWith('ended a turn')).map((l) => [l.sessionId, l.code])).toEqual([[stranded, 'internal_error']]);
    expect(await sessionEvents(stack.url, cancelled)).toEqual(cancelledEvents);
    expect(await status(cancelled)).toBe('idle');
  }, 90_000);
});

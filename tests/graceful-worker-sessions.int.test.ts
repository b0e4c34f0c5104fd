import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertContiguous, httpClient, waitUntil } from '@cadre/testing';
import { sessionEvents, type SessionLogEvent } from './support/session-client.ts';
import { TestStack } from './support/stack.ts';

// SIGTERM on a worker process with 20 session turns streaming: the turns that can finish within the drain
// deadline finish there, the rest are handed back at the deadline and resumed by another worker from their last
// boundary. Turns parked on a client tool hold no worker and are left as they were.
let stack: TestStack;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 0 });
});
afterAll(async () => {
  await stack?.stop();
});

const GRACE_MS = 5_000;
// Each streams an answer after a builtin tool call (the tool's result is a boundary). Short ones have at most a
// second or two of stream left when the signal comes; long ones (~200 chunks 40 ms apart) outlast the deadline.
const SHORT = 'Compute then answer [[scripted:call=calculate({"expression":"6*7"})]] [[scripted:words=90]] [[scripted:chunk_delay=40]]';
const LONG = 'Compute then explain [[scripted:call=calculate({"expression":"6*7"})]] [[scripted:words=600]] [[scripted:chunk_delay=40]]';

const api = () => httpClient(stack.url);
const events = (sessionId: string): Promise<SessionLogEvent[]> => sessionEvents(stack.url, sessionId);
async function newSession(tools: object[] = []): Promise<string> {
  const res = await api().post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'drain', tools });
  expect(res.status).toBe(201);
  return res.body.session.session_id;
}
async function session(sessionId: string): Promise<{ status: string; last_seq: number; pending_tool_calls: unknown[] }> {
  return (await api().get<{ session: { status: string; last_seq: number; pending_tool_calls: unknown[] } }>(`/api/sessions/${sessionId}`)).body.session;
}
/** The text a client shows: deltas after the last `attempt_lost` replace what the lost attempt had streamed. */
function shownText(evs: SessionLogEvent[]): string {
  const restart = evs.findLastIndex((e) => e.event_type === 'attempt_lost');
  return evs.slice(restart + 1).filter((e) => e.event_type === 'text_delta').map((e) => e.payload.content).join('');
}

describe('worker SIGTERM with session turns in flight', () => {
  it('finishes what fits in the drain deadline, hands the rest back to another worker from the last boundary, leaves parked turns alone, exits 0', async () => {
    const draining = await stack.spawnWorkerProcess({ CADRE_SHUTDOWN_GRACE_MS: String(GRACE_MS), WORKER_CONCURRENCY: '24' });
    let successor: Awaited<ReturnType<TestStack['spawnWorkerProcess']>> | undefined;
    try {
      // Two turns parked on a client tool before the signal: no job holds them.
      const clientTool = { name: 'read_file', description: 'Reads a file' };
      const parked = await Promise.all([0, 1].map(() => newSession([clientTool])));
      for (const id of parked) await api().post(`/api/sessions/${id}/messages`, { content: 'Read it [[scripted:call=read_file({"path":"a.txt"})]]' });
      for (const id of parked) await waitUntil('the turn to park', async () => (await session(id)).status === 'waiting_tool');
      const parkedBefore = await Promise.all(parked.map(events));

      const short = await Promise.all(Array.from({ length: 10 }, () => newSession()));
      const long = await Promise.all(Array.from({ length: 10 }, () => newSession()));
      await Promise.all([...short.map((id) => [id, SHORT]), ...long.map((id) => [id, LONG])].map(async ([id, content]) => {
        expect((await api().post(`/api/sessions/${id}/messages`, { content })).status).toBe(202);
      }));
      // Every turn is mid-stream (its tool ran, its answer has begun) when the signal comes.
      await Promise.all([...short, ...long].map((id) => waitUntil('the answer to stream', async () => (await events(id)).some((e) => e.event_type === 'text_delta'))));
      const exited = new Promise<number | null>((resolve) => draining.once('exit', resolve));
      draining.kill('SIGTERM');
      expect(await exited).toBe(0);

      // The short turns ended on the draining worker, before it exited.
      for (const id of short) {
        const evs = await events(id);
        expect(evs.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['end_turn']);
        expect(evs.some((e) => e.event_type === 'attempt_lost')).toBe(false);
      }
      // The long ones were handed back at the deadline, unfinished, and say so in their logs.
      for (const id of long) {
        const evs = await events(id);
        expect(evs.some((e) => e.event_type === 'turn_complete')).toBe(false);
        expect(evs.filter((e) => e.event_type === 'attempt_lost').map((e) => e.payload)).toEqual([
          expect.objectContaining({ attempt: 1, reason: 'worker_shutdown', host_id: expect.stringContaining(`:${draining.pid}`) }),
        ]);
      }
      // Parked turns: not a single event more, still waiting on their client.
      for (const [i, id] of parked.entries()) {
        expect(await session(id)).toMatchObject({ status: 'waiting_tool', last_seq: parkedBefore[i]!.at(-1)!.seq });
        expect(await events(id)).toEqual(parkedBefore[i]);
      }

      successor = await stack.spawnWorkerProcess();
      for (const id of [...short, ...long]) {
        const evs = await waitUntil('the turn to end', async () => {
          const all = await events(id);
          return all.some((e) => e.event_type === 'turn_complete') ? all : null;
        }, { timeoutMs: 60_000 });
        // One log, no gap, nothing twice; the tool ran once; the turn ended once.
        assertContiguous(evs.map((e) => e.seq));
        expect(evs.filter((e) => e.event_type === 'tool_call')).toHaveLength(1);
        expect(evs.filter((e) => e.event_type === 'tool_result').map((e) => e.payload.result)).toEqual(['42']);
        expect(evs.filter((e) => e.event_type === 'turn_complete').map((e) => e.payload.stop_reason)).toEqual(['end_turn']);
        // What a client shows is the answer, once: the resumed model call re-streams it after the marker.
        const messages = (await api().get<{ messages: { role: string; content: string | null }[] }>(`/api/sessions/${id}/messages`)).body.messages;
        expect(messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
        expect(shownText(evs)).toBe(messages.at(-1)!.content);
      }
      // A parked turn resumes on the successor when its client answers.
      for (const id of parked) {
        const call = (await session(id)).pending_tool_calls[0] as { tool_call_id: string };
        expect((await api().post(`/api/sessions/${id}/tool-results`, { tool_call_id: call.tool_call_id, success: true, result: 'file text' })).status).toBe(200);
        await waitUntil('the parked turn to end', async () => (await session(id)).status === 'idle');
        const evs = await events(id);
        assertContiguous(evs.map((e) => e.seq));
        expect(evs.filter((e) => e.event_type === 'turn_complete')).toHaveLength(1);
      }
    } finally {
      draining.kill('SIGKILL');
      successor?.kill('SIGKILL');
    }
  }, 120_000);
});

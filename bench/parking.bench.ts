// Parking: N sessions whose turns wait on client tools hold no worker slot. With WORKER_CONCURRENCY=4, N
// sessions each send a message whose model answer calls a client tool; once all are parked (status
// waiting_tool), how many BullMQ jobs are active, how long does a team task submitted then take to start
// (POST → worker_started), what Redis memory does a parked session cost, and how long from a ToolResult to the
// resumed turn's next model call (the tool_result event → the activity `thinking` event, both log timestamps)?
// Gateway, worker pool and scripted model are processes of their own; this process only drives them over HTTP.
//
//   npm exec -- node bench/parking.bench.ts        (BENCH_PARKED=500, BENCH_RESUMES=50)
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { AGENT_QUEUE, KeyBuilder } from '@cadre/store';
import { pool, summarize, until } from './support/latency.ts';
import { loadText } from './support/machine.ts';
import { round, usedMemory } from './support/redis-stats.ts';
import { note, printTable, progress, saveResults } from './support/report.ts';
import { api, startStack } from './support/stack.ts';

const PARKED = Number(process.env.BENCH_PARKED ?? 500);
const RESUMES = Math.min(PARKED, Number(process.env.BENCH_RESUMES ?? 50));
const CONCURRENCY = 4;
const PREFIX = 'cadre';

interface Ev {
  seq: number;
  timestamp: string;
  event_type: string;
  payload: Record<string, unknown>;
}

async function main(): Promise<void> {
  const stack = await startStack({ keyPrefix: PREFIX, worker: { env: { WORKER_CONCURRENCY: String(CONCURRENCY) } } });
  const { gateway } = stack;
  const conn = new Redis(stack.redis.url, { maxRetriesPerRequest: null });
  const queue = new Queue(AGENT_QUEUE, { connection: conn, prefix: new KeyBuilder(PREFIX).bullPrefix() });
  try {
    await until(async () => (await queue.getWorkers()).length > 0, 'the worker pool', 30_000, 100);
    const memoryBefore = await usedMemory(conn);
    const ids: string[] = [];
    const tool = { name: 'client_lookup', description: 'Looks something up on the client', timeout_ms: 600_000 };
    await pool(Array.from({ length: PARKED }, (_, i) => i), 16, async (i) => {
      const created = await api<{ session: { session_id: string } }>(gateway.url, 'POST', '/api/sessions', { workspace_id: 'bench', tools: [tool] });
      if (created.status !== 201) throw new Error(`POST /api/sessions: ${created.status}`);
      const id = created.body.session.session_id;
      ids.push(id);
      const sent = await api(gateway.url, 'POST', `/api/sessions/${id}/messages`, { content: `Session ${i} [[scripted:call=client_lookup({"key":${i}})]]` });
      if (sent.status !== 202) throw new Error(`POST messages: ${sent.status}`);
    });
    progress(`${PARKED} sessions sent their message`);
    const parkStart = Date.now();
    await until(async () => {
      let parked = 0;
      await pool(ids, 32, async (id) => {
        const { body } = await api<{ session: { status: string } }>(gateway.url, 'GET', `/api/sessions/${id}`);
        if (body.session.status === 'waiting_tool') parked++;
      });
      progress(`${parked}/${PARKED} parked`);
      return parked === PARKED;
    }, 'every session to park', 600_000, 500);
    const parkedInMs = Date.now() - parkStart;
    await until(async () => (await queue.getActiveCount()) === 0, 'no active job', 30_000, 50);
    const counts = await queue.getJobCounts('active', 'waiting', 'delayed');
    const memoryParked = await usedMemory(conn);

    // A team task submitted while every session is parked: does it start at once?
    const t0 = Date.now();
    const task = await api<{ task: { task_id: string } }>(gateway.url, 'POST', '/api/tasks', { workspace_id: 'bench', goal: 'Start now', team: { workers: [{ role: 'solo' }] } });
    let startedAt = NaN;
    await until(async () => {
      const { body } = await api<{ events: { event_type: string; timestamp: string }[] }>(gateway.url, 'GET', `/api/tasks/${task.body.task.task_id}/events?limit=100`);
      const started = body.events.find((e) => e.event_type === 'worker_started');
      if (started) startedAt = Date.parse(started.timestamp);
      return started !== undefined;
    }, 'the task to start', 30_000, 10);
    const taskStartMs = startedAt - t0;

    // Resume latency: one ToolResult at a time, ToolResult logged → the resumed turn's model call.
    const resume = new Float64Array(RESUMES);
    for (let i = 0; i < RESUMES; i++) {
      const id = ids[i]!;
      const { body } = await api<{ session: { pending_tool_calls: { tool_call_id: string }[] } }>(gateway.url, 'GET', `/api/sessions/${id}`);
      const callId = body.session.pending_tool_calls[0]!.tool_call_id;
      await api(gateway.url, 'POST', `/api/sessions/${id}/tool-results`, { tool_call_id: callId, success: true, result: `value ${i}` });
      let events: Ev[] = [];
      await until(async () => {
        events = (await api<{ events: Ev[] }>(gateway.url, 'GET', `/api/sessions/${id}/events?limit=1000`)).body.events;
        return events.some((e) => e.event_type === 'turn_complete');
      }, 'the resumed turn to end', 30_000, 10);
      const result = events.find((e) => e.event_type === 'tool_result')!;
      const thinking = events.find((e) => e.event_type === 'activity' && e.payload.state === 'thinking' && e.seq > result.seq)!;
      resume[i] = Date.parse(thinking.timestamp) - Date.parse(result.timestamp);
    }
    const resumeSummary = summarize(resume);
    const perSessionBytes = (memoryParked - memoryBefore) / PARKED;
    printTable(`Parking: ${PARKED} sessions waiting on client tools, WORKER_CONCURRENCY=${CONCURRENCY} (gateway, worker, model: own processes)`, [
      ['measure', 'value'],
      ['active jobs while all are parked', counts.active ?? 0],
      ['delayed jobs (tool deadlines)', counts.delayed ?? 0],
      ['all parked after their messages (ms)', parkedInMs],
      ['team task POST → worker_started (ms)', taskStartMs],
      ['Redis memory per parked session (bytes)', Math.round(perSessionBytes)],
      ['ToolResult → next model call p50 (ms, log timestamps)', resumeSummary.p50_ms],
      ['ToolResult → next model call p99 (ms)', resumeSummary.p99_ms],
    ]);
    note(`goal: 0 slots held → ${counts.active ?? 0} active; the task starts at once → ${taskStartMs} ms; resume p50/p99 ${resumeSummary.p50_ms}/${resumeSummary.p99_ms} ms over ${RESUMES} (log timestamps have 1 ms resolution); ${loadText()}`);
    saveResults('parking', {
      parked: PARKED, concurrency: CONCURRENCY, active_jobs_parked: counts.active ?? 0, delayed_jobs: counts.delayed ?? 0,
      parked_in_ms: parkedInMs, task_start_ms: taskStartMs, redis_bytes_per_parked_session: round(perSessionBytes, 0), resume: resumeSummary,
    });
  } finally {
    await queue.close();
    conn.disconnect();
    await stack.stop();
  }
}

await main();

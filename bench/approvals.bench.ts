// Approvals: N team workers each wait on a pending approval with WORKER_CONCURRENCY=4. The workspace's policy
// asks before `calculate`; N one-worker tasks each call it once and park. Once all N approvals are pending: how
// many BullMQ jobs are active (goal 0: waiting holds no slot), how long a task submitted then takes to start
// (POST → worker_started), what Redis memory a parked task with its pending approval costs (whole-instance delta,
// and the approval's own keys by MEMORY USAGE), and how long from a decision to the tool's run (the
// worker_approval_resolved event → the resumed worker's next event, log timestamps on Redis's clock; the worker
// runs the tool between them, and calculate takes well under a millisecond).
// Gateway, worker pool and scripted model are processes of their own; this process only drives them over HTTP.
//
//   npm exec -- node bench/approvals.bench.ts        (BENCH_PENDING=1000, BENCH_DECISIONS=50)
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { AGENT_QUEUE, KeyBuilder } from '@cadre/store';
import { pool, summarize, until } from './support/latency.ts';
import { loadText } from './support/machine.ts';
import { round, usedMemory } from './support/redis-stats.ts';
import { note, printTable, progress, saveResults } from './support/report.ts';
import { api, startStack } from './support/stack.ts';

const PENDING = Number(process.env.BENCH_PENDING ?? 1000);
const DECISIONS = Math.min(PENDING, Number(process.env.BENCH_DECISIONS ?? 50));
const CONCURRENCY = 4;
const PREFIX = 'cadre';
const WORKSPACE = 'bench';

interface Ev {
  seq: number;
  timestamp: string;
  event_type: string;
  worker_id: string | null;
  payload: Record<string, unknown>;
}

async function events(base: string, taskId: string): Promise<Ev[]> {
  return (await api<{ events: Ev[] }>(base, 'GET', `/api/tasks/${taskId}/events?limit=1000`)).body.events;
}

async function main(): Promise<void> {
  const stack = await startStack({ keyPrefix: PREFIX, worker: { env: { WORKER_CONCURRENCY: String(CONCURRENCY) } } });
  const { gateway } = stack;
  const conn = new Redis(stack.redis.url, { maxRetriesPerRequest: null });
  const keys = new KeyBuilder(PREFIX);
  const queue = new Queue(AGENT_QUEUE, { connection: conn, prefix: keys.bullPrefix() });
  try {
    await until(async () => (await queue.getWorkers()).length > 0, 'the worker pool', 30_000, 100);
    const put = await api(gateway.url, 'PUT', `/api/workspaces/${WORKSPACE}/approval-policy`, { rules: [{ tool: 'calculate', action: 'ask', timeout_secs: 3600 }] });
    if (put.status !== 200) throw new Error(`PUT approval-policy: ${put.status}`);
    const memoryBefore = await usedMemory(conn);
    const taskIds: string[] = [];
    await pool(Array.from({ length: PENDING }, (_, i) => i), 16, async (i) => {
      const created = await api<{ task: { task_id: string } }>(gateway.url, 'POST', '/api/tasks', {
        workspace_id: WORKSPACE,
        goal: `Compute ${i}`,
        team: { workers: [{ role: 'calc', instructions: `Compute. [[scripted:call=calculate({"expression":"${i}*2"})]]`, tools: ['calculate'] }] },
      });
      if (created.status !== 201) throw new Error(`POST /api/tasks: ${created.status}`);
      taskIds.push(created.body.task.task_id);
    });
    progress(`${PENDING} tasks submitted`);
    const parkStart = Date.now();
    // Each parked worker's job is delayed until its approval's deadline: N delayed jobs = N pending approvals.
    await until(async () => {
      const delayed = await queue.getDelayedCount();
      progress(`${delayed}/${PENDING} pending`);
      return delayed === PENDING;
    }, 'every worker to park on its approval', 900_000, 500);
    const parkedInMs = Date.now() - parkStart;
    await until(async () => (await queue.getActiveCount()) === 0, 'no active job', 30_000, 50);
    const counts = await queue.getJobCounts('active', 'waiting', 'delayed', 'waiting-children');
    const memoryParked = await usedMemory(conn);
    // The approval's own keys (its record and the parked transcript), sampled.
    const sample = taskIds.slice(0, 20);
    const ownBytes = (await Promise.all(sample.map(async (id) => {
      const a = keys.taskApprovals(id);
      return Number(await conn.memory('USAGE', a.approvals)) + Number(await conn.memory('USAGE', a.parked));
    }))).reduce((x, y) => x + y, 0) / sample.length;
    const inbox = await api<{ approvals: unknown[]; next_cursor: string | null }>(gateway.url, 'GET', `/api/approvals?workspace_id=${WORKSPACE}&status=pending&limit=200`);

    // A task submitted while every approval is pending: does it start at once?
    const t0 = Date.now();
    const task = await api<{ task: { task_id: string } }>(gateway.url, 'POST', '/api/tasks', { workspace_id: 'bench-other', goal: 'Start now', team: { workers: [{ role: 'solo' }] } });
    let startedAt = NaN;
    await until(async () => {
      const started = (await events(gateway.url, task.body.task.task_id)).find((e) => e.event_type === 'worker_started');
      if (started) startedAt = Date.parse(started.timestamp);
      return started !== undefined;
    }, 'the task to start', 30_000, 10);
    const taskStartMs = startedAt - t0;

    // Decision → tool run, one decision at a time: worker_approval_resolved → the resumed worker's next event.
    const latency = new Float64Array(DECISIONS);
    const decideMs = new Float64Array(DECISIONS);
    for (let i = 0; i < DECISIONS; i++) {
      const taskId = taskIds[i]!;
      const asked = (await events(gateway.url, taskId)).find((e) => e.event_type === 'worker_approval_requested')!;
      const sent = performance.now();
      const decided = await api(gateway.url, 'POST', `/api/approvals/${String(asked.payload.approval_id)}/decision`, { approved: true });
      decideMs[i] = performance.now() - sent;
      if (decided.status !== 200) throw new Error(`decision: ${decided.status}`);
      let log: Ev[] = [];
      await until(async () => {
        log = await events(gateway.url, taskId);
        return log.some((e) => e.event_type === 'worker_completed');
      }, 'the resumed worker to finish', 30_000, 10);
      const resolved = log.find((e) => e.event_type === 'worker_approval_resolved')!;
      const next = log.find((e) => e.seq > resolved.seq && e.worker_id === 'calc-1')!;
      latency[i] = Date.parse(next.timestamp) - Date.parse(resolved.timestamp);
    }
    const toTool = summarize(latency);
    const decide = summarize(decideMs);
    const perTaskBytes = (memoryParked - memoryBefore) / PENDING;
    printTable(`Approvals: ${PENDING} pending, WORKER_CONCURRENCY=${CONCURRENCY} (gateway, worker, model: own processes)`, [
      ['measure', 'value'],
      ['active jobs while all are pending', counts.active ?? 0],
      ['delayed jobs (one per parked worker: its timeout)', counts.delayed ?? 0],
      ['all pending after submission (ms)', parkedInMs],
      ['new task POST → worker_started (ms)', taskStartMs],
      ['Redis memory per parked task with its approval (bytes, whole instance)', Math.round(perTaskBytes)],
      ['of which the approval record + parked transcript (bytes, MEMORY USAGE)', Math.round(ownBytes)],
      ['GET /api/approvals first page (200 of them)', `${inbox.body.approvals.length}, next_cursor ${inbox.body.next_cursor ? 'set' : 'null'}`],
      ['POST decision round trip p50 / p99 (ms)', `${decide.p50_ms} / ${decide.p99_ms}`],
      ['decision → tool run, p50 (ms, log timestamps)', toTool.p50_ms],
      ['decision → tool run, p99 (ms)', toTool.p99_ms],
    ]);
    note(`goal: 0 slots held → ${counts.active ?? 0} active; a new task starts at once → ${taskStartMs} ms; decision → tool p50/p99 ${toTool.p50_ms}/${toTool.p99_ms} ms over ${DECISIONS} (log timestamps have 1 ms resolution); ${loadText()}`);
    saveResults('approvals', {
      pending: PENDING, concurrency: CONCURRENCY, active_jobs_pending: counts.active ?? 0, delayed_jobs: counts.delayed ?? 0,
      parked_in_ms: parkedInMs, task_start_ms: taskStartMs, redis_bytes_per_parked_task: round(perTaskBytes, 0),
      redis_bytes_approval_keys: round(ownBytes, 0), decide_http: decide, decision_to_tool: toTool,
    });
  } finally {
    await queue.close();
    conn.disconnect();
    await stack.stop();
  }
}

await main();

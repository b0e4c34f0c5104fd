// Cancel latency: a task whose one worker is inside a running tool (a 30 s wait) and whose other worker is inside
// a hanging model call (a 30 s delay) is cancelled with POST /api/tasks/:id/cancel; how long until both workers'
// BullMQ jobs have left `active`? Measured from just before the request to each job's finishedOn (stamped by
// the worker process, ms), over N cancels one after another. Gateway, worker pool and scripted model are each
// a process of their own; this process only sends the requests and reads job state from Redis. The integration
// test (tests/cancel-and-crash.int.test.ts) checks that the abort happens; the figure lives here.
//
//   npm exec -- node bench/cancel.bench.ts
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { AGENT_QUEUE, KeyBuilder, agentJobId } from '@cadre/store';
import { sleep, summarize, until } from './support/latency.ts';
import { loadText, machineLoad } from './support/machine.ts';
import { round } from './support/redis-stats.ts';
import { note, printTable, progress, saveResults } from './support/report.ts';
import { api, startStack } from './support/stack.ts';

const CANCELS = Number(process.env.BENCH_CANCELS ?? 20);
const PREFIX = 'cadre';
const TEAM = [
  { role: 'sleeper', instructions: 'Sleep. [[scripted:call=wait({"ms":30000})]]', tools: ['wait'] },
  { role: 'idler', instructions: 'Think slowly. [[scripted:delay=30000]]' },
];
const WATCHED = ['sleeper-1', 'idler-2'];

interface Sample {
  /** POST /api/tasks/:id/cancel round trip. */
  response_ms: number;
  /** Request sent → job finishedOn, per worker, and the later of the two. */
  tool_job_ms: number;
  model_job_ms: number;
  both_ms: number;
  status: number;
  load_1m: number;
}

type Ev = { event_type: string; worker_id?: string | null };

async function main(): Promise<void> {
  const stack = await startStack({ keyPrefix: PREFIX });
  const { gateway } = stack;
  const conn = new Redis(stack.redis.url, { maxRetriesPerRequest: null });
  const queue = new Queue(AGENT_QUEUE, { connection: conn, prefix: new KeyBuilder(PREFIX).bullPrefix() });
  const samples: Sample[] = [];
  try {
    for (let i = 0; i < CANCELS + 1; i++) {
      const created = await api<{ task: { task_id: string } }>(gateway.url, 'POST', '/api/tasks', { workspace_id: 'bench', goal: `Long job ${i}`, team: { workers: TEAM } });
      if (created.status !== 201) throw new Error(`POST /api/tasks: ${created.status} ${JSON.stringify(created.body)}`);
      const taskId = created.body.task.task_id;
      // Both workers inside the calls to abort: the tool call is out, the idler's model turn has begun.
      await until(async () => {
        const { body } = await api<{ events: Ev[] }>(gateway.url, 'GET', `/api/tasks/${taskId}/events?limit=1000`);
        const has = (t: string, w: string): boolean => body.events.some((e) => e.event_type === t && e.worker_id === w);
        return has('worker_tool_call', 'sleeper-1') && has('worker_phase', 'idler-2');
      }, 'both workers to be inside their calls', 60_000, 50);
      await sleep(100); // let the tool start and the model request go out
      const load = machineLoad().loadavg[0];
      const t0 = Date.now();
      const res = await api<unknown>(gateway.url, 'POST', `/api/tasks/${taskId}/cancel`, { reason: 'bench' });
      const responseMs = Date.now() - t0;
      const finished: number[] = [];
      for (const workerId of WATCHED) {
        let job = await queue.getJob(agentJobId(taskId, workerId));
        const deadline = Date.now() + 60_000;
        while (job?.finishedOn === undefined && Date.now() < deadline) {
          await sleep(20);
          job = await queue.getJob(agentJobId(taskId, workerId));
        }
        finished.push((job?.finishedOn ?? NaN) - t0);
      }
      // The first cancel warms the path (JIT): not kept.
      if (i === 0) continue;
      samples.push({ response_ms: responseMs, tool_job_ms: finished[0]!, model_job_ms: finished[1]!, both_ms: Math.max(...finished), status: res.status, load_1m: load });
      if (i % 5 === 0) progress(`${i}/${CANCELS} cancels`);
    }
    const col = (f: (s: Sample) => number) => summarize(Float64Array.from(samples.map(f)));
    const both = col((s) => s.both_ms);
    const tool = col((s) => s.tool_job_ms);
    const modelJob = col((s) => s.model_job_ms);
    const response = col((s) => s.response_ms);
    printTable(`Cancel: ${samples.length} cancels of a task with a running tool and a hanging model call (gateway, worker, model: own processes)`, [
      ['measure', 'p50 ms', 'p99 ms', 'max ms', 'mean ms'],
      ['POST cancel answered', response.p50_ms, response.p99_ms, response.max_ms, response.mean_ms],
      ['tool job (30 s wait) left active', tool.p50_ms, tool.p99_ms, tool.max_ms, tool.mean_ms],
      ['model job (30 s delay) left active', modelJob.p50_ms, modelJob.p99_ms, modelJob.max_ms, modelJob.mean_ms],
      ['both left active', both.p50_ms, both.p99_ms, both.max_ms, both.mean_ms],
    ]);
    note(`goal: both jobs out of active < 1,000 ms → p99 ${both.p99_ms} ms; non-200 answers: ${samples.filter((s) => s.status !== 200).length}; ${loadText()}`);
    saveResults('cancel', { cancels: samples.length, response, tool_job: tool, model_job: modelJob, both, samples: samples.map((s) => ({ ...s, both_ms: round(s.both_ms) })) });
  } finally {
    await queue.close();
    conn.disconnect();
    await stack.stop();
  }
}

await main();

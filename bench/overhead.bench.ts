// Overhead: one-worker team tasks through Cadre (POST /api/tasks, then WatchTeam to the end) against a raw BullMQ
// flow of the same shape (a parent and one child on one queue; the child makes one streaming model call, then the
// parent makes one with the child's result). Same private Redis, same scripted model, same worker concurrency,
// same number of tasks in flight; everything runs in this one process, so both pay for the model and the client.
//
//   npm exec -- node bench/overhead.bench.ts
import * as grpc from '@grpc/grpc-js';
import { FlowProducer, Job, Queue, QueueEvents, Worker, type ConnectionOptions } from 'bullmq';
import type OpenAI from 'openai';
import { createModelClient } from '@cadre/agent';
import type { AgentServiceClient } from '@cadre/protocol';
import { startScriptedModel, type ScriptedModel } from '@cadre/scripted-model';
import { AGENT_JOB_OPTIONS } from '@cadre/store';
import { gatewayConfig } from '../apps/gateway/src/config.ts';
import { startGateway } from '../apps/gateway/src/gateway.ts';
import { workerConfig } from '../apps/worker/src/config.ts';
import { startWorkerPool } from '../apps/worker/src/worker-pool.ts';
import { BENCH_API_KEY, grpcChannels, newPrefix, openWatch, silentLogger, startPrivateRedis } from './support/harness.ts';
import { sleep } from './support/latency.ts';
import { RedisStats, round, topCommands, totalCalls, type CommandCounts } from './support/redis-stats.ts';
import { note, printTable, saveResults } from './support/report.ts';

const TASKS = 200;
const CONCURRENCY = 8;
const WARMUP = 16;
/** Quiet time over which each system's background Redis traffic (stall checks, sweepers) is measured. */
const IDLE_MS = 1_000;
const GOAL = 'Summarise the release notes';
const INSTRUCTIONS = 'List the three most important changes.';

interface SystemResult {
  system: 'cadre' | 'raw-bullmq';
  tasks: number;
  seconds: number;
  tasks_per_s: number;
  /** Every Redis command over the run (Lua-internal calls included) ÷ tasks. */
  commands_per_task: number;
  top_commands_per_task: Record<string, number>;
  all_commands_per_task: Record<string, number>;
  idle_commands_per_s: number;
  model_requests_per_task: number;
  /** CPU of this process (client, gateway, workers, model) per task, and its share of one core over the run. */
  node_cpu_ms_per_task: number;
  node_cpu_busy: number;
  redis_cpu_ms_per_task: number;
  /** Mean ms per stage of a task, from the log's timestamps (Cadre) or the jobs' (raw); Redis clock ms. */
  stages_ms: Stages;
  /** Mean ms from submit to the client seeing the end: with CONCURRENCY in flight, tasks/s ≈ CONCURRENCY / this. */
  task_latency_ms: number;
}

/** submit → worker job starts → worker done → lead starts → lead done (task ends) → client sees the end. */
interface Stages {
  submit: number;
  to_worker_start: number;
  worker_run: number;
  to_lead_start: number;
  lead_run: number;
  to_client: number;
}
const STAGES: (keyof Stages)[] = ['submit', 'to_worker_start', 'worker_run', 'to_lead_start', 'lead_run', 'to_client'];

/** Wall-clock instants of one task, ms since the epoch. */
interface Marks {
  submitted: number;
  accepted: number;
  workerStart: number;
  workerEnd: number;
  leadStart: number;
  leadEnd: number;
  seen: number;
}

function meanStages(marks: Marks[]): { stages: Stages; latency: number } {
  const mean = (f: (m: Marks) => number): number => round(marks.reduce((a, m) => a + f(m), 0) / marks.length, 1);
  return {
    stages: {
      submit: mean((m) => m.accepted - m.submitted),
      to_worker_start: mean((m) => m.workerStart - m.accepted),
      worker_run: mean((m) => m.workerEnd - m.workerStart),
      to_lead_start: mean((m) => m.leadStart - m.workerEnd),
      lead_run: mean((m) => m.leadEnd - m.leadStart),
      to_client: mean((m) => m.seen - m.leadEnd),
    },
    latency: mean((m) => m.seen - m.submitted),
  };
}

/** Runs `total` tasks, `concurrency` at a time; returns the wall time in seconds. */
async function drive(total: number, concurrency: number, runOne: (i: number) => Promise<void>): Promise<number> {
  let next = 0;
  const start = performance.now();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < total) await runOne(next++);
  }));
  return (performance.now() - start) / 1000;
}

async function measure(
  system: SystemResult['system'], stats: RedisStats, model: ScriptedModel, runOne: (i: number) => Promise<() => Promise<Marks>>,
): Promise<SystemResult> {
  await drive(WARMUP, CONCURRENCY, async (i) => void (await runOne(i)));
  await stats.reset();
  await sleep(IDLE_MS);
  const idle = totalCalls(await stats.counts());
  await stats.reset();
  const requestsBefore = model.requestCount();
  const cpuBefore = process.cpuUsage();
  const redisCpuBefore = await stats.cpuSeconds();
  const marksOf: (() => Promise<Marks>)[] = [];
  const seconds = await drive(TASKS, CONCURRENCY, async (i) => void marksOf.push(await runOne(WARMUP + i)));
  const counts: CommandCounts = await stats.counts();
  const cpu = process.cpuUsage(cpuBefore);
  const redisCpu = (await stats.cpuSeconds()) - redisCpuBefore;
  // Stage marks are read only now, so reading them (raw: job hashes) is not counted above.
  const { stages, latency } = meanStages(await Promise.all(marksOf.map((f) => f())));
  return {
    system,
    tasks: TASKS,
    seconds: round(seconds, 2),
    tasks_per_s: round(TASKS / seconds, 1),
    commands_per_task: round(totalCalls(counts) / TASKS, 1),
    top_commands_per_task: topCommands(counts, 6, TASKS),
    all_commands_per_task: topCommands(counts, 100, TASKS),
    idle_commands_per_s: round(idle / (IDLE_MS / 1000), 1),
    model_requests_per_task: round((model.requestCount() - requestsBefore) / TASKS, 2),
    node_cpu_ms_per_task: round((cpu.user + cpu.system) / 1000 / TASKS, 2),
    node_cpu_busy: round((cpu.user + cpu.system) / 1e6 / seconds, 2),
    redis_cpu_ms_per_task: round((redisCpu * 1000) / TASKS, 2),
    stages_ms: stages,
    task_latency_ms: latency,
  };
}

async function cadre(redisUrl: string, model: ScriptedModel, stats: RedisStats): Promise<SystemResult> {
  const env = {
    REDIS_URL: redisUrl, OPENAI_BASE_URL: model.url, OPENAI_API_KEY: 'scripted', CADRE_API_KEY: BENCH_API_KEY,
    CADRE_KEY_PREFIX: newPrefix(), PORT: '0', HOST: '127.0.0.1', WORKER_CONCURRENCY: String(CONCURRENCY),
  };
  const gateway = await startGateway({ ...gatewayConfig(env), redisUrl }, silentLogger);
  const pool = await startWorkerPool({ ...workerConfig(env), redisUrl, openaiBaseUrl: model.url, openaiApiKey: 'scripted' }, silentLogger);
  const [client] = grpcChannels(`127.0.0.1:${gateway.port}`, 1) as [AgentServiceClient];
  const base = `http://127.0.0.1:${gateway.port}`;
  const runOne = async (i: number): Promise<() => Promise<Marks>> => {
    const submitted = Date.now();
    const res = await fetch(`${base}/api/tasks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BENCH_API_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ workspace_id: 'bench', goal: `${GOAL} #${i}`, team: { workers: [{ role: 'writer', instructions: INSTRUCTIONS }] } }),
    });
    const accepted = Date.now();
    if (res.status !== 201) throw new Error(`POST /api/tasks: ${res.status} ${await res.text()}`);
    const { task } = (await res.json()) as { task: { task_id: string } };
    let status = '';
    let seen = 0;
    const at: Record<string, number> = {};
    const end = await openWatch(client, task.task_id, 0, (e) => {
      const who = e.event && 'workerId' in e.event.value ? e.event.value.workerId : '';
      at[`${e.eventType}:${who}`] = new Date(e.timestamp ?? 0).getTime();
      if (e.event?.$case === 'taskStatusChanged') {
        status = e.event.value.status;
        seen = Date.now();
      }
    }).ended;
    if (end.code !== grpc.status.OK || status !== 'completed') throw new Error(`task ${task.task_id} ended ${status} (${end.code} ${end.details})`);
    const marks: Marks = {
      submitted, accepted, seen,
      workerStart: at['worker_started:writer-1']!, workerEnd: at['worker_exited:writer-1']!,
      leadStart: at['worker_started:lead']!, leadEnd: at['task_completed:']!,
    };
    return async () => marks;
  };
  try {
    return await measure('cadre', stats, model, runOne);
  } finally {
    client.close();
    await pool.close(0);
    await gateway.close();
  }
}

/** One streaming chat completion, read to its end: the call a Cadre agent makes for a one-turn answer. */
async function modelCall(openai: OpenAI, role: string, instructions: string, input: string): Promise<string> {
  const stream = await openai.chat.completions.create({
    model: 'cadre-scripted',
    messages: [
      { role: 'system', content: `You are the ${role} agent in a Cadre team.\n${instructions}` },
      { role: 'user', content: input },
    ],
    stream: true,
    stream_options: { include_usage: true },
  });
  let content = '';
  for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? '';
  return content;
}

async function rawBullmq(redisUrl: string, model: ScriptedModel, stats: RedisStats): Promise<SystemResult> {
  // Connection options rather than a shared client: BullMQ then owns (and closes) every connection it opens.
  const { hostname, port } = new URL(redisUrl);
  const connection: ConnectionOptions = { host: hostname, port: Number(port), maxRetriesPerRequest: null };
  const opts = { connection, prefix: `{${newPrefix()}:bull}` };
  const queueName = 'raw-agents';
  const openai = createModelClient({ baseURL: model.url, apiKey: 'scripted' });
  const worker = new Worker(queueName, async (job: Job<{ goal: string }>) => {
    if (job.name === 'worker') return modelCall(openai, 'writer', INSTRUCTIONS, `Team goal: ${job.data.goal}`);
    const results = Object.values(await job.getChildrenValues<string>());
    return modelCall(openai, 'lead', 'Combine the results.', `Team goal: ${job.data.goal}\n\nWorker results:\n${results.join('\n')}`);
  }, { ...opts, concurrency: CONCURRENCY });
  const flow = new FlowProducer(opts);
  const events = new QueueEvents(queueName, opts);
  const queue = new Queue(queueName, opts);
  await Promise.all([worker.waitUntilReady(), events.waitUntilReady()]);
  const runOne = async (i: number): Promise<() => Promise<Marks>> => {
    const goal = `${GOAL} #${i}`;
    const submitted = Date.now();
    const node = await flow.add({
      name: 'lead', queueName, data: { goal }, opts: AGENT_JOB_OPTIONS,
      children: [{ name: 'worker', queueName, data: { goal }, opts: AGENT_JOB_OPTIONS }],
    });
    const accepted = Date.now();
    const result = (await node.job.waitUntilFinished(events)) as string;
    const seen = Date.now();
    if (!result.startsWith('Scripted answer')) throw new Error(`raw flow ${node.job.id} answered "${result}"`);
    return async () => {
      const [lead, child] = await Promise.all([Job.fromId(queue, node.job.id!), Job.fromId(queue, node.children![0]!.job.id!)]);
      return {
        submitted, accepted, seen,
        workerStart: child!.processedOn!, workerEnd: child!.finishedOn!, leadStart: lead!.processedOn!, leadEnd: lead!.finishedOn!,
      };
    };
  };
  try {
    return await measure('raw-bullmq', stats, model, runOne);
  } finally {
    await worker.close();
    await flow.close();
    await events.close();
    await queue.close();
  }
}

async function main(): Promise<void> {
  const redis = await startPrivateRedis();
  const model = await startScriptedModel();
  const stats = new RedisStats(redis.url);
  try {
    const c = await cadre(redis.url, model, stats);
    const r = await rawBullmq(redis.url, model, stats);
    printTable(`Overhead: ${TASKS} one-worker tasks, ${CONCURRENCY} in flight, worker concurrency ${CONCURRENCY}, scripted model`, [
      ['system', 'tasks/s', 'seconds', 'redis cmds/task', 'idle cmds/s', 'node cpu ms/task', 'core busy', 'redis cpu ms/task', 'top commands per task'],
      ...[c, r].map((x) => [
        x.system, x.tasks_per_s, x.seconds, x.commands_per_task, x.idle_commands_per_s, x.node_cpu_ms_per_task, x.node_cpu_busy, x.redis_cpu_ms_per_task,
        Object.entries(x.top_commands_per_task).map(([k, v]) => `${k} ${v}`).join(', '),
      ]),
    ]);
    printTable('Where a task\'s time goes (mean ms; Cadre: log timestamps, raw: job timestamps)', [
      ['system', ...STAGES, 'total'],
      ...[c, r].map((x) => [x.system, ...STAGES.map((k) => x.stages_ms[k]), x.task_latency_ms]),
    ]);
    const ratio = round(c.tasks_per_s / r.tasks_per_s, 2);
    const commandsRatio = round(c.commands_per_task / r.commands_per_task, 1);
    note(`throughput cadre/raw = ×${ratio} (goal ≥ 0.5); Redis commands per task cadre/raw = ×${commandsRatio}`);
    saveResults('overhead', { tasks: TASKS, concurrency: CONCURRENCY, cadre: c, raw_bullmq: r, ratio_throughput: ratio, ratio_commands_per_task: commandsRatio });
  } finally {
    await stats.close();
    await model.close();
    await redis.stop();
  }
}

await main();

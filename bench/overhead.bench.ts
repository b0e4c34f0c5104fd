// Overhead: one-worker team tasks through Cadre (POST /api/tasks, then WatchTeam to the end) against a raw BullMQ
// flow of the same shape (a parent and one child; the child makes one streaming model call, then the parent makes
// one with the child's result). Every part is a process of its own: gateway, worker pool (concurrency 8), raw
// BullMQ worker (bench/load/raw-flow-worker.ts, concurrency 8), the scripted model, and one client per system
// (bench/load/task-client.ts). Each system has its own redis-server, so INFO commandstats counts only its
// traffic. Rounds alternate cadre, raw. Node CPU per task is read from /proc for the serving processes: Cadre's
// gateway + worker; raw's worker + client (the raw client does what the gateway does for Cadre: add the flow and
// follow its events).
//
//   npm exec -- node bench/overhead.bench.ts
import { profiledWindow, spawnGateway, spawnScriptedModel, startPrivateRedis } from './support/harness.ts';
import { sleep, type LatencySummary } from './support/latency.ts';
import { spawnNode, type Message, type NodeChild } from './support/procs.ts';
import { RedisStats, round, scriptTotal, topCommands, totalCalls } from './support/redis-stats.ts';
import { note, printTable, progress, saveResults } from './support/report.ts';
import { alternate, range } from './support/rounds.ts';
import { spawnWorkerPool } from './support/stack.ts';

const TASKS = Number(process.env.BENCH_TASKS ?? 200);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONCURRENCY = 8;
const WARMUP = 16;
/** Quiet time over which each system's background Redis traffic (stall checks, sweepers) is measured. */
const IDLE_MS = 1_000;

interface Sample {
  tasks: number;
  seconds: number;
  tasks_per_s: number;
  /** CPU ms per task of the serving processes (see the header), and of each. */
  node_cpu_ms_per_task: number;
  cpu_ms_per_task_by_process: Record<string, number>;
  redis_cpu_ms_per_task: number;
  /** Every Redis command in the window (Lua-internal calls included) ÷ tasks. */
  commands_per_task: number;
  top_commands_per_task: Record<string, number>;
  /** Time Redis spent in scripts (the store's FCALLs, BullMQ's EVALSHAs), ms per task. */
  lua_ms_per_task: number;
  /** POST /api/tasks (Cadre) or FlowProducer.add (raw), as the client saw it. */
  submit: LatencySummary;
  task: LatencySummary;
}

interface System {
  name: string;
  stats: RedisStats;
  client: NodeChild;
  /** The processes whose CPU counts as the system's. */
  serving: Record<string, NodeChild>;
}

async function runTasks(client: NodeChild, tasks: number) {
  client.send({ cmd: 'run', tasks, concurrency: CONCURRENCY });
  return client.next<Message & { seconds: number; submit: LatencySummary; task: LatencySummary }>('done', 300_000);
}

const measure = (s: System) => async (): Promise<Sample> => {
  await s.stats.reset();
  const cpu0 = Object.fromEntries(Object.entries(s.serving).map(([k, p]) => [k, p.cpuSeconds()]));
  const redisCpu0 = await s.stats.cpuSeconds();
  const r = await profiledWindow(`overhead ${s.name}`, () => runTasks(s.client, TASKS));
  const byProcess = Object.fromEntries(Object.entries(s.serving).map(([k, p]) => [k, round(((p.cpuSeconds() - cpu0[k]!) * 1000) / TASKS, 2)]));
  const redisCpu = (await s.stats.cpuSeconds()) - redisCpu0;
  const { calls, usec } = await s.stats.detail();
  return {
    tasks: TASKS,
    seconds: round(r.seconds, 2),
    tasks_per_s: round(TASKS / r.seconds, 1),
    node_cpu_ms_per_task: round(Object.values(byProcess).reduce((a, b) => a + b, 0), 2),
    cpu_ms_per_task_by_process: byProcess,
    redis_cpu_ms_per_task: round((redisCpu * 1000) / TASKS, 2),
    commands_per_task: round(totalCalls(calls) / TASKS, 1),
    top_commands_per_task: topCommands(calls, 8, TASKS),
    lua_ms_per_task: round(scriptTotal(usec) / 1000 / TASKS, 2),
    submit: r.submit,
    task: r.task,
  };
};

async function idleCommandsPerSecond(stats: RedisStats): Promise<number> {
  await stats.reset();
  await sleep(IDLE_MS);
  return round(totalCalls(await stats.counts()) / (IDLE_MS / 1000), 1);
}

async function main(): Promise<void> {
  const cadreRedis = await startPrivateRedis();
  const rawRedis = await startPrivateRedis();
  const children: NodeChild[] = [];
  // Part by part, not startStack: the raw system's Redis starts between Cadre's and the model, and the model stops
  // before the gateway (with the other children, below).
  const { child: model, url: modelUrl } = await spawnScriptedModel();
  children.push(model);
  const gateway = await spawnGateway({ REDIS_URL: cadreRedis.url });
  const worker = spawnWorkerPool(cadreRedis.url, modelUrl, { env: { WORKER_CONCURRENCY: String(CONCURRENCY) } });
  const prefix = '{rawbench:bull}';
  const rawWorker = spawnNode('bench/load/raw-flow-worker.ts', { args: [JSON.stringify({ redisUrl: rawRedis.url, prefix, modelUrl, concurrency: CONCURRENCY })] });
  const cadreClient = spawnNode('bench/load/task-client.ts', { args: [JSON.stringify({ mode: 'cadre', url: gateway.url, target: gateway.target })] });
  const rawClient = spawnNode('bench/load/task-client.ts', { args: [JSON.stringify({ mode: 'raw', redisUrl: rawRedis.url, prefix })] });
  children.push(worker, rawWorker, cadreClient, rawClient);
  const cadre: System = { name: 'cadre', stats: new RedisStats(cadreRedis.url), client: cadreClient, serving: { gateway: gateway.child, worker } };
  const raw: System = { name: 'raw_bullmq', stats: new RedisStats(rawRedis.url), client: rawClient, serving: { worker: rawWorker, client: rawClient } };
  try {
    await Promise.all([rawWorker.next('ready'), cadreClient.next('ready'), rawClient.next('ready')]);
    // Warm-up (JIT, pools); the Cadre worker pool is ready once its first tasks complete.
    await runTasks(cadreClient, WARMUP);
    await runTasks(rawClient, WARMUP);
    const [idleCadre, idleRaw] = await Promise.all([idleCommandsPerSecond(cadre.stats), idleCommandsPerSecond(raw.stats)]);
    progress('warm; measuring');
    const samples = await alternate(ROUNDS, { cadre: measure(cadre), raw_bullmq: measure(raw) });

    printTable(`Overhead: ${TASKS} one-worker tasks per sample, ${CONCURRENCY} in flight, worker concurrency ${CONCURRENCY}, scripted model; rounds alternate`, [
      ['round', 'system', 'tasks/s', 'node cpu ms/task', 'by process', 'redis cmds/task', 'lua ms/task', 'redis cpu ms/task', 'submit p50/p99/mean ms', 'task mean/p99 ms', 'load', 'box busy'],
      ...samples.map((s) => [
        s.round, s.side, s.tasks_per_s, s.node_cpu_ms_per_task, Object.entries(s.cpu_ms_per_task_by_process).map(([k, v]) => `${k} ${v}`).join(', '),
        s.commands_per_task, s.lua_ms_per_task, s.redis_cpu_ms_per_task,
        `${s.submit.p50_ms}/${s.submit.p99_ms}/${s.submit.mean_ms}`, `${s.task.mean_ms}/${s.task.p99_ms}`, s.load.loadavg.join('/'), s.machine_busy,
      ]),
    ]);
    const of = (side: string) => samples.filter((s) => s.side === side);
    const pick = (side: string, f: (s: Sample) => number): number[] => of(side).map(f);
    const perRound = (f: (s: Sample) => number): number[] => of('cadre').map((c) => f(c) / f(of('raw_bullmq').find((r) => r.round === c.round)!));
    note(`node CPU per task: cadre ${range(pick('cadre', (s) => s.node_cpu_ms_per_task), 1)} ms, raw ${range(pick('raw_bullmq', (s) => s.node_cpu_ms_per_task), 1)} ms (×${range(perRound((s) => s.node_cpu_ms_per_task), 1)})`);
    note(`Redis commands per task: cadre ${range(pick('cadre', (s) => s.commands_per_task))}, raw ${range(pick('raw_bullmq', (s) => s.commands_per_task))}; idle commands/s: cadre ${idleCadre}, raw ${idleRaw}`);
    note(`submit mean: POST /api/tasks ${range(pick('cadre', (s) => s.submit.mean_ms))} ms, flow.add ${range(pick('raw_bullmq', (s) => s.submit.mean_ms))} ms`);
    note(`throughput cadre/raw ×${range(perRound((s) => s.tasks_per_s), 2)} (goal ≥ 0.5×)`);
    for (const s of [of('cadre')[0]!, of('raw_bullmq')[0]!]) note(`${s.side} top commands per task (round 1): ${Object.entries(s.top_commands_per_task).map(([k, v]) => `${k} ${v}`).join(', ')}`);
    saveResults('overhead', {
      tasks: TASKS, concurrency: CONCURRENCY, rounds: ROUNDS, idle_commands_per_s: { cadre: idleCadre, raw_bullmq: idleRaw }, samples,
      summary: {
        cadre_node_cpu_ms_per_task: pick('cadre', (s) => s.node_cpu_ms_per_task), raw_node_cpu_ms_per_task: pick('raw_bullmq', (s) => s.node_cpu_ms_per_task),
        cadre_commands_per_task: pick('cadre', (s) => s.commands_per_task), raw_commands_per_task: pick('raw_bullmq', (s) => s.commands_per_task),
        cadre_submit_mean_ms: pick('cadre', (s) => s.submit.mean_ms), raw_submit_mean_ms: pick('raw_bullmq', (s) => s.submit.mean_ms),
        cadre_submit_p99_ms: pick('cadre', (s) => s.submit.p99_ms), raw_submit_p99_ms: pick('raw_bullmq', (s) => s.submit.p99_ms),
        cadre_tasks_per_s: pick('cadre', (s) => s.tasks_per_s), raw_tasks_per_s: pick('raw_bullmq', (s) => s.tasks_per_s),
        throughput_ratio: perRound((s) => s.tasks_per_s).map((x) => round(x, 2)),
      },
    });
  } finally {
    for (const c of [cadreClient, rawClient]) c.send({ cmd: 'exit' });
    for (const c of children.reverse()) await c.stop();
    await gateway.stop();
    await cadre.stats.close();
    await raw.stats.close();
    await cadreRedis.stop();
    await rawRedis.stop();
  }
}

await main();

// Where a POST /api/tasks's CPU goes, part by part, in one process against a private redis-server: each step of
// the create path (the create script, the listing, BullMQ's flow add, the mark's removal, the whole TaskService
// create) run alone N times, one at a time, with the process's CPU time (process.cpuUsage: this process only, not
// Redis's) and the bytes it allocated per call (heap growth plus what the GCs in the window freed, from
// v8.GCProfiler); CPU includes the socket syscalls each step makes.
// Not a bench with a baseline and not recorded: a profiling helper for bench/submit.bench.ts's figure.
//   npm exec -- node --max-semi-space-size=8 bench/submit-parts.ts [calls]   # the gateway's young generation
import { GCProfiler, getHeapStatistics } from 'node:v8';
import { FlowProducer, type ConnectionOptions } from 'bullmq';
import { pino } from 'pino';
import { startEmbeddedRedis } from '@cadre/embedded-redis';
import { AGENT_JOB_OPTIONS, ApprovalStore, EventFanout, KeyBuilder, TaskStore, TeamQueue, connectRedis, type RedisClient, type TaskRecord } from '@cadre/store';
import { TaskService } from '../apps/gateway/src/tasks/task-service.ts';
import { printTable } from './support/report.ts';
import { median } from './support/rounds.ts';

const CALLS = Number(process.argv[2] ?? 2000);
const ROUNDS = 3;

const redis = await startEmbeddedRedis();
const logger = pino({ level: 'silent' });
const keys = new KeyBuilder('parts');
// As the gateway connects (gateway.ts): the stores on an auto-pipelined connection, BullMQ on its own.
const storeRedis = connectRedis(redis.url, 'parts-store', { autoPipelining: true });
const bullRedis = connectRedis(redis.url, 'parts-queue');
const store = new TaskStore({ redis: storeRedis, keys });
const queue = new TeamQueue({ connection: bullRedis, keys, onError: () => undefined });
const fanout = new EventFanout({ keys, subscriber: connectRedis(redis.url, 'parts-sub', { shardedSubscriber: true }), logger });
const tasks = new TaskService({ store, approvals: new ApprovalStore({ redis: storeRedis, keys }), queue, fanout, logger, defaultMaxWorkers: 8 });
// The raw bench's client: a FlowProducer on a connection of its own (BullMQ's commands defined on it).
const rawFlow = new FlowProducer({ connection: connectRedis(redis.url, 'parts-raw') as unknown as ConnectionOptions, prefix: '{rawparts:bull}' });

const body = (i: number) => ({ workspace_id: 'bench', goal: `Summarise the release notes #${i}`, team: { workers: [{ role: 'writer', instructions: 'List the three most important changes.' }] } });
const team = { lead: { instructions: 'lead' }, workers: [{ role: 'writer', instructions: 'List the three most important changes.', tools: [] }], max_workers: 8 };
const created: TaskRecord[] = [];
let n = 0;

const parts: Record<string, (i: number) => Promise<unknown>> = {
  'TaskService.create (all of it)': (i) => tasks.create({ workspaces: 'all' }, body(i)),
  'store.createTask (mark + create script)': async (i) => created.push((await store.createTask({ workspace_id: 'bench', goal: `g #${i}`, team, metadata: {} })).task),
  'store.listNew (listing + stats)': (i) => store.listNew(created[i % created.length]!),
  'queue.enqueueTask (FlowProducer.add)': (i) => queue.enqueueTask(created[i % created.length]!),
  'store.enqueued (ZREM of the mark)': (i) => store.enqueued(created[i % created.length]!.task_id),
  'raw FlowProducer.add, parent + 1 child': (i) => rawFlow.add({
    name: 'lead', queueName: 'raw', data: { goal: `g #${i}` }, opts: AGENT_JOB_OPTIONS,
    children: [{ name: 'worker', queueName: 'raw', data: { goal: `g #${i}` }, opts: AGENT_JOB_OPTIONS }],
  }),
  // Built and dropped unsent (nothing reaches Redis): what ioredis's Pipeline constructor costs on each connection.
  'BullMQ connection: multi() built, not sent': async () => void (bullRedis as RedisClient).multi(),
  'store connection: multi() built, not sent': async () => void storeRedis.multi(),
  'store connection: PING': () => storeRedis.ping(),
};

/** CPU and bytes allocated per call: the heap's growth over the window plus what each GC inside it freed. */
async function window(f: (i: number) => Promise<unknown>): Promise<{ cpuUs: number; bytes: number }> {
  const gcs = new GCProfiler();
  gcs.start();
  const heap0 = getHeapStatistics().used_heap_size;
  const cpu0 = process.cpuUsage();
  for (let i = 0; i < CALLS; i++) await f(n++);
  const cpu = process.cpuUsage(cpu0);
  const heap1 = getHeapStatistics().used_heap_size;
  const freed = (gcs.stop()?.statistics ?? []).reduce((sum, s) => sum + s.beforeGC.heapStatistics.usedHeapSize - s.afterGC.heapStatistics.usedHeapSize, 0);
  return { cpuUs: (cpu.user + cpu.system) / CALLS, bytes: (heap1 - heap0 + freed) / CALLS };
}

try {
  // Warm-up: JIT, connections, scripts loaded; then tasks for the parts that need one.
  for (const f of Object.values(parts)) for (let i = 0; i < 300; i++) await f(n++);
  const results: Record<string, { cpuUs: number[]; bytes: number[] }> = {};
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, f] of Object.entries(parts)) {
      const r = await window(f);
      (results[name] ??= { cpuUs: [], bytes: [] }).cpuUs.push(r.cpuUs);
      results[name].bytes.push(r.bytes);
    }
  }
  const fmt = (xs: number[]) => `${Math.round(Math.min(...xs))}–${Math.round(Math.max(...xs))} (med ${Math.round(median(xs))})`;
  printTable(`One call at a time, ${CALLS} calls per window, ${ROUNDS} rounds: this process's CPU (µs) and allocation (bytes) per call`, [
    ['part', 'cpu µs', 'allocated bytes'],
    ...Object.entries(results).map(([name, r]) => [name, fmt(r.cpuUs), fmt(r.bytes)]),
  ]);
} finally {
  await queue.close();
  await rawFlow.close();
  await fanout.close();
  storeRedis.disconnect();
  bullRedis.disconnect();
  await redis.stop();
}

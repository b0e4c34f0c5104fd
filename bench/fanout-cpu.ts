// Gateway CPU per WatchTeam delivery, in one process: the real gateway (startGateway: fan-out, WatchTeam handler,
// telemetry interceptor, grpc-js) on a private Redis, 100 watchers in a child process over 4 grpc-js channels, and
// this process appending one event at a time through TaskStore.appendWorkerEvent, a few ms apart, so each event's
// 100 writes go out on their own whatever the machine's load. CPU is this process's (process.cpuUsage); a round
// with no watchers (the appends alone, the gateway hearing nothing) is subtracted, so what is left is the fan-out's
// and the gRPC writes' share. Figures for comparing two versions of the fan-out, not a headline: nothing is saved.
//
//   npm exec -- node bench/fanout-cpu.ts            # BENCH_EVENTS=1000 BENCH_ROUNDS=3 BENCH_GAP_MS=4
import { findFreePort } from '@cadre/embedded-redis';
import { gatewayConfig } from '../apps/gateway/src/config.ts';
import { startGateway } from '../apps/gateway/src/gateway.ts';
import { BENCH_API_KEY, benchStore, createLiveTask, finishLiveTask, newPrefix, silentLogger, startPrivateRedis } from './support/harness.ts';
import { sleep } from './support/latency.ts';
import { spawnNode, type Message } from './support/procs.ts';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 1000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const GAP_MS = Number(process.env.BENCH_GAP_MS ?? 4);
const WATCHERS = 100;
const CHANNELS = 4;

const redis = await startPrivateRedis();
const prefix = newPrefix();
const port = await findFreePort('127.0.0.1');
const config = gatewayConfig({ REDIS_URL: redis.url, CADRE_KEY_PREFIX: prefix, CADRE_API_KEY: BENCH_API_KEY, HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'warn' });
const gateway = await startGateway({ ...config, redis: config.redis! }, silentLogger);
const store = benchStore(redis.url, prefix);

const cpuMicros = (): number => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

/** CPU µs this process spent while `EVENTS` events were appended (and, with watchers, delivered to each). */
async function sample(watched: boolean): Promise<{ cpuUs: number; delivered: number }> {
  const task = await createLiveTask(store, 'fanout-cpu');
  const watchers = watched
    ? spawnNode('bench/load/fanout-watchers.ts', { args: [JSON.stringify({ mode: 'grpc', target: `127.0.0.1:${port}`, taskId: task.taskId, afterSeq: task.lastSeq, readers: WATCHERS, channels: CHANNELS, count: EVENTS })] })
    : undefined;
  const append = (mode: string, turn: number) => store.appendWorkerEvent(task.taskId, task.workerId, task.lease, 'worker_phase', { phase: 'thinking', mode, turn });
  await append('warm', 0);
  await watchers?.next('attached', 30_000);
  await sleep(200);
  const before = cpuMicros();
  for (let i = 0; i < EVENTS; i++) {
    await append('bench', i);
    await sleep(GAP_MS);
  }
  const done = watchers ? await watchers.next<Message & { delivered: number }>('done', 60_000) : { delivered: 0 };
  const cpuUs = cpuMicros() - before;
  await finishLiveTask(store, task);
  if (watchers) {
    watchers.send({ cmd: 'finish' });
    await watchers.exited;
  }
  return { cpuUs, delivered: done.delivered };
}

const perDelivery: number[] = [];
try {
  await sample(true); // warm-up: JIT, connections
  for (let r = 1; r <= ROUNDS; r++) {
    const base = await sample(false);
    const run = await sample(true);
    const ns = ((run.cpuUs - base.cpuUs) * 1000) / run.delivered;
    perDelivery.push(ns);
    console.log(`round ${r}: ${run.delivered} deliveries, CPU ${(run.cpuUs / 1e3).toFixed(0)} ms with watchers, ${(base.cpuUs / 1e3).toFixed(0)} ms appends alone → ${ns.toFixed(0)} ns per delivery`);
  }
  const sorted = [...perDelivery].sort((a, b) => a - b);
  console.log(`CPU per delivery: ${sorted[0]!.toFixed(0)}–${sorted.at(-1)!.toFixed(0)} ns over ${ROUNDS} rounds (${EVENTS} events × ${WATCHERS} watchers, ${GAP_MS} ms apart); load ${(await import('node:os')).loadavg().map((x) => x.toFixed(2)).join('/')}`);
} finally {
  await gateway.close();
  await store.redis.quit().catch(() => undefined);
  await redis.stop();
}

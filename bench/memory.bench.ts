// Memory: the real gateway as a child process holding 1,000 open WatchTeam streams on live tasks (RSS from /proc),
// then one stalled watcher (a grpc-js call paused before its first message, so HTTP/2 flow control stops the
// gateway's writes) while its task gets a burst of ~1 KB events: the gateway's RSS must stay bounded, and the
// watcher must be closed with RESOURCE_EXHAUSTED (a resumable status) rather than buffered without end.
//
//   npm exec -- node bench/memory.bench.ts
import * as grpc from '@grpc/grpc-js';
import type { TaskStore } from '@cadre/store';
import {
  benchStore, closeChannels, createLiveTask, finishLiveTask, GATEWAY_NODE_ARGS, grpcChannels, newPrefix, openWatch, spawnGateway, startPrivateRedis,
  type GatewayProcess, type LiveTask, type Watch,
} from './support/harness.ts';
import { paced, sleep, until } from './support/latency.ts';
import { round } from './support/redis-stats.ts';
import { loadText } from './support/machine.ts';
import { note, printTable, progress, saveResults } from './support/report.ts';

const TASKS = 1_000;
const WATCHERS_PER_TASK = 1;
const CHANNELS = 10;
const STALL_EVENTS = 20_000;
const STALL_PAYLOAD_BYTES = 1_024;
const STALL_RATE = 5_000;
const RESUME_WAIT_MS = 5_000;
/** The gateway's default CADRE_WATCHER_BUFFER. */
const WATCHER_BUFFER = 1_024;

async function inBatches<T>(n: number, batch: number, make: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < n; i += batch) out.push(...(await Promise.all(Array.from({ length: Math.min(batch, n - i) }, (_, j) => make(i + j)))));
  return out;
}

/** Highest RSS over a few samples, so one sample between GCs does not decide. */
async function rssOver(gateway: GatewayProcess, ms: number): Promise<number> {
  let max = 0;
  for (let t = 0; t < ms; t += 100) {
    max = Math.max(max, gateway.rss().rssMb);
    await sleep(100);
  }
  return round(max, 1);
}

async function holdWatchers(gateway: GatewayProcess, store: TaskStore) {
  const tasks = await inBatches(TASKS, 100, () => createLiveTask(store, 'memory'));
  progress(`${TASKS} live tasks created; opening watchers`);
  const clients = grpcChannels(gateway.target, CHANNELS);
  const watches: Watch[] = [];
  for (const [i, task] of tasks.entries()) {
    for (let k = 0; k < WATCHERS_PER_TASK; k++) watches.push(openWatch(clients[watches.length % CHANNELS]!, task.taskId, 0));
    if (i % 100 === 99) await sleep(10); // let the gateway accept streams in waves, as real clients arrive
  }
  progress(`${watches.length} WatchTeam calls opened`);
  // Each read its backlog (task_queued, worker_started); then one live event per task reaches every watcher.
  await until(() => watches.every((w) => w.received >= 2), `${watches.length} watchers to read their backlog`, 30_000, 50);
  progress('every watcher read its backlog; appending one live event per task');
  await inBatches(TASKS, 200, (i) => store.appendWorkerEvent(tasks[i]!.taskId, tasks[i]!.workerId, tasks[i]!.lease, 'worker_phase', { phase: 'thinking', mode: 'live', turn: 1 }));
  await until(() => watches.every((w) => w.received >= 3), 'the live event at every watcher', 30_000, 50);
  return { tasks, clients, watches };
}

interface Burst {
  rss_before_mb: number;
  rss_peak_mb: number;
  rss_after_mb: number;
  append_seconds: number;
}

/** STALL_EVENTS ~1 KB tool-call events on `task` at STALL_RATE, sampling the gateway's RSS throughout. */
async function burst(gateway: GatewayProcess, store: TaskStore, task: LiveTask): Promise<Burst> {
  const before = await rssOver(gateway, 500);
  let peak = before;
  const sampler = setInterval(() => (peak = Math.max(peak, gateway.rss().rssMb)), 50);
  const args = JSON.stringify({ blob: 'x'.repeat(STALL_PAYLOAD_BYTES) });
  const started = performance.now();
  // Paced, so a stalled watcher's gateway writer has filled the stream's flow-control window and waits for
  // `drain` well before the watcher's buffer overflows: a client that stopped reading, not a burst outrunning
  // the gateway.
  let failed = 0;
  await paced(STALL_EVENTS, STALL_RATE, (i) => {
    store.appendWorkerEvent(task.taskId, task.workerId, task.lease, 'worker_tool_call', { tool: 'bench', call_id: `c${i}`, arguments: args }).catch(() => failed++);
  });
  await store.redis.ping();
  if (failed > 0) throw new Error(`${failed} appends failed`);
  const appendSeconds = (performance.now() - started) / 1000;
  await sleep(1_000);
  clearInterval(sampler);
  const after = await rssOver(gateway, 500);
  return { rss_before_mb: before, rss_peak_mb: round(Math.max(peak, after), 1), rss_after_mb: after, append_seconds: round(appendSeconds, 2) };
}

/** The same burst with a watcher that reads: what the burst itself costs the gateway, stalled watcher or not. */
async function readingWatcher(gateway: GatewayProcess, store: TaskStore) {
  const task = await createLiveTask(store, 'control');
  const [client] = grpcChannels(gateway.target, 1);
  const watch = openWatch(client!, task.taskId, task.lastSeq);
  await until(async () => (await gateway.metrics()).cadre_grpc_watchers! >= TASKS * WATCHERS_PER_TASK + 1, 'the reading watcher to attach');
  progress('control: burst to a watcher that reads');
  const b = await burst(gateway, store, task);
  await finishLiveTask(store, task);
  const end = await Promise.race([watch.ended, sleep(10_000).then(() => undefined)]);
  client!.close();
  return { ...b, received: watch.received, status: end ? grpc.status[end.code] : 'no end within 10 s' };
}

async function stalledWatcher(gateway: GatewayProcess, store: TaskStore) {
  const task: LiveTask = await createLiveTask(store, 'stalled');
  const [client] = grpcChannels(gateway.target, 1);
  const watch = openWatch(client!, task.taskId, task.lastSeq);
  // Never read: grpc-js stops reading the HTTP/2 stream, its flow-control window fills, the gateway's writes block.
  watch.call.pause();
  await until(async () => (await gateway.metrics()).cadre_grpc_watchers! >= TASKS * WATCHERS_PER_TASK + 1, 'the stalled watcher to attach');
  progress('stalled: burst to a watcher that never reads');
  const b = await burst(gateway, store, task);
  const metricsWhileStalled = await gateway.metrics();
  const receivedWhileStalled = watch.received;

  // Now read: whatever the stream holds arrives, then its status.
  watch.call.resume();
  const end = await Promise.race([watch.ended, sleep(10_000).then(() => undefined)]);
  progress(`stalled watcher resumed: ${end ? `${grpc.status[end.code]} ${end.details}` : 'no status'} after ${watch.received} events`);
  const resumeFrom = Number(/after_seq=(\d+)/.exec(end?.details ?? '')?.[1] ?? NaN);

  // The status is resumable: a new watch from after_seq should get the rest of the log, contiguously, to the end.
  await finishLiveTask(store, task);
  let resumedFirst = 0;
  let resumedLast = 0;
  let resumedCount = 0;
  const resumedWatch = Number.isFinite(resumeFrom)
    ? openWatch(client!, task.taskId, resumeFrom, (e) => {
      resumedFirst ||= e.seq;
      resumedLast = e.seq;
      resumedCount++;
    })
    : undefined;
  const resumed = resumedWatch && (await Promise.race([resumedWatch.ended, sleep(RESUME_WAIT_MS).then(() => undefined)]));
  if (resumedWatch && !resumed) resumedWatch.call.cancel();
  client!.close();
  const lastSeq = (await store.getTask(task.taskId))!.last_seq;
  return {
    ...b,
    received_while_stalled: receivedWhileStalled,
    grpc_watchers_while_stalled: metricsWhileStalled.cadre_grpc_watchers,
    fanout_watchers_while_stalled: metricsWhileStalled.cadre_watchers,
    received_after_resume: end?.received ?? watch.received,
    status: end ? `${grpc.status[end.code]}: ${end.details}` : 'no status within 10 s of resuming',
    resumed: resumedWatch
      ? {
        from: resumeFrom, first: resumedFirst, last: resumedLast, count: resumedCount, log_last_seq: lastSeq,
        contiguous: resumedFirst === resumeFrom + 1 && resumedCount === resumedLast - resumeFrom,
        status: resumed ? grpc.status[resumed.code] : `no end within ${RESUME_WAIT_MS / 1000} s`,
      }
      : null,
  };
}

async function main(): Promise<void> {
  const redis = await startPrivateRedis();
  const prefix = newPrefix();
  // Arguments to this script go to the gateway's node after the flags it ships with (e.g. --max-semi-space-size=8).
  const nodeArgs = process.argv.slice(2);
  // --trace-gc tells live heap (after each full GC) from heap V8 keeps committed, which RSS cannot.
  const gateway = await spawnGateway({ REDIS_URL: redis.url, CADRE_KEY_PREFIX: prefix, CADRE_WATCHER_BUFFER: String(WATCHER_BUFFER) }, ['--trace-gc', ...nodeArgs]);
  const store = benchStore(redis.url, prefix);
  try {
    // Baseline after the WatchTeam path has run once (code loaded, pools warm), not straight after start-up.
    const warm = await createLiveTask(store, 'warm-up');
    const [warmClient] = grpcChannels(gateway.target, 1);
    const warmWatch = openWatch(warmClient!, warm.taskId, 0);
    await finishLiveTask(store, warm);
    await warmWatch.ended;
    warmClient!.close();
    const idle = await rssOver(gateway, 1_000);
    progress(`gateway up (pid ${gateway.pid}), idle RSS ${idle} MB`);

    const opened = performance.now();
    const held = await holdWatchers(gateway, store);
    const openSeconds = (performance.now() - opened) / 1000;
    const holding = await rssOver(gateway, 1_000);
    const m = await gateway.metrics();
    const streams = held.watches.length;

    const control = await readingWatcher(gateway, store);
    const stall = await stalledWatcher(gateway, store);
    const peakMb = round(gateway.rss().peakMb, 1);
    const gcs = gateway.fullGcs();
    const heap = {
      full_gcs: gcs.length,
      max_live_after_full_gc_mb: Math.max(0, ...gcs.map((g) => g.liveMb)),
      last_live_after_full_gc_mb: gcs.at(-1)?.liveMb ?? NaN,
      max_committed_mb: Math.max(0, ...gcs.map((g) => g.committedMb)),
    };
    const unbounded = round((STALL_EVENTS * (STALL_PAYLOAD_BYTES + 150)) / 2 ** 20, 1);

    for (const w of held.watches) w.call.cancel();
    closeChannels(held.clients);

    printTable(`Memory: one gateway process (child, node --trace-gc ${[...GATEWAY_NODE_ARGS, ...nodeArgs].join(' ')}), RSS from /proc`, [
      ['measure', 'value'],
      ['RSS idle (after one warm-up watch), MB', idle],
      [`RSS holding ${streams} WatchTeam streams (${TASKS} live tasks × ${WATCHERS_PER_TASK}), MB`, holding],
      ['  per stream, KB', round(((holding - idle) * 1024) / streams, 1)],
      ['  open + backlog + one live event at each, s', round(openSeconds, 1)],
      ['  gateway reports (cadre_grpc_watchers / cadre_watchers)', `${m.cadre_grpc_watchers} / ${m.cadre_watchers}`],
      [`burst: ${STALL_EVENTS} events × ${STALL_PAYLOAD_BYTES} B at ${STALL_RATE}/s (an unbounded buffer: ${unbounded} MB)`, ''],
      ['  to a reading watcher: RSS before / peak / after, MB', `${control.rss_before_mb} / ${control.rss_peak_mb} / ${control.rss_after_mb}`],
      ['  to a stalled watcher: RSS before / peak / after, MB', `${stall.rss_before_mb} / ${stall.rss_peak_mb} / ${stall.rss_after_mb}`],
      ['  stalled: events received / streams still open (grpc / fan-out)', `${stall.received_while_stalled} / ${stall.grpc_watchers_while_stalled} / ${stall.fanout_watchers_while_stalled}`],
      ['  stalled, once it reads: events, then status', `${stall.received_after_resume}, ${stall.status}`],
      ['  WatchTeam from that after_seq: seqs received (log ends at)', stall.resumed ? `${stall.resumed.first}..${stall.resumed.last} (${stall.resumed.log_last_seq}), ${stall.resumed.status}` : '-'],
      ['peak RSS over the whole run (VmHWM), MB', peakMb],
      [`V8 heap after full GCs (${heap.full_gcs}): max live / last live / max committed, MB`, `${heap.max_live_after_full_gc_mb} / ${heap.last_live_after_full_gc_mb} / ${heap.max_committed_mb}`],
    ]);
    note(`goal: < 256 MB with ${streams} streams → ${holding} MB; stalled-watcher burst peak ${stall.rss_peak_mb} MB (goal < 256 MB); ${loadText()}.`);
    note(` Burst peak growth: reading +${round(control.rss_peak_mb - control.rss_before_mb, 1)} MB, stalled +${round(stall.rss_peak_mb - stall.rss_before_mb, 1)} MB.`);
    saveResults('memory', {
      gateway_node_args: nodeArgs, gateway_shipped_node_args: GATEWAY_NODE_ARGS, tasks: TASKS, watchers_per_task: WATCHERS_PER_TASK, grpc_channels: CHANNELS, watcher_buffer: WATCHER_BUFFER,
      rss_idle_mb: idle, rss_holding_mb: holding, streams, per_stream_kb: round(((holding - idle) * 1024) / streams, 1),
      open_seconds: round(openSeconds, 1), gateway_watchers: m.cadre_grpc_watchers, heap, burst: { events: STALL_EVENTS, payload_bytes: STALL_PAYLOAD_BYTES, rate: STALL_RATE, unbounded_buffer_mb: unbounded }, reading: control, stalled: stall, peak_rss_mb: peakMb,
    });
  } finally {
    await gateway.stop();
    await store.redis.quit().catch(() => undefined);
    await redis.stop();
  }
}

await main();

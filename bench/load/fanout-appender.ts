// Load generator for fanout.bench.ts, in a process of its own: appends `count` worker_phase events to a live task
// at `rate` through TaskStore.appendWorkerEvent (what a worker does); event i carries turn = i. Reports each
// append call's start time (CLOCK_MONOTONIC ms) so the parent can pair them with the watchers' arrivals.
import { benchStore } from '../support/harness.ts';
import { paced } from '../support/latency.ts';
import { argJson, commands, emit, f64ToBase64, monoMs } from '../support/child.ts';

const o = argJson<{ redisUrl: string; prefix: string; taskId: string; workerId: string; lease: string; count: number; rate: number }>();
const store = benchStore(o.redisUrl, o.prefix);
await store.redis.ping();
emit('ready');
for await (const c of commands<{ cmd: 'go' }>()) {
  if (c.cmd !== 'go') break;
  const t0 = new Float64Array(o.count);
  let failed = 0;
  const pending: Promise<unknown>[] = [];
  const achieved = await paced(o.count, o.rate, (i) => {
    t0[i] = monoMs();
    pending.push(store.appendWorkerEvent(o.taskId, o.workerId, o.lease, 'worker_phase', { phase: 'thinking', mode: 'bench', turn: i }).catch(() => failed++));
  });
  await Promise.all(pending);
  emit('done', { t0: f64ToBase64(t0), achieved: Math.round(achieved), failed });
  break;
}
await store.redis.quit();

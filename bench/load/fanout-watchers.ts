// Load generator for fanout.bench.ts, in a process of its own: `readers` WatchTeam watchers over a few grpc-js
// channels (mode grpc, against the gateway or the bare broadcaster), or `readers` ioredis connections each
// running its own XREAD BLOCK on the task's stream (mode xread). It reports `attached` once every reader saw
// the warm-up event, then `done` with each bench event's arrival time (CLOCK_MONOTONIC ms, shared by every
// process on the machine) per reader, once every reader has every event or has been closed.
import { Redis } from 'ioredis';
import { closeChannels, grpcChannels, openWatch, type Watch } from '../support/harness.ts';
import { argJson, commands, emit, f64ToBase64, monoMs, ownCpuSeconds } from '../support/child.ts';

interface Options {
  mode: 'grpc' | 'xread';
  target?: string;
  redisUrl?: string;
  stream?: string;
  taskId: string;
  afterSeq: number;
  readers: number;
  channels: number;
  count: number;
}
const o = argJson<Options>();
const arrivals = new Float64Array(o.readers * o.count).fill(NaN);
const warmed = new Uint8Array(o.readers);
let warm = 0;
let got = 0;
let closed = 0;
let attachedSent = false;
let doneSent = false;
const cpuAtAttach = { v: 0 };
const earlyStatus: string[] = [];

/** `mode` marks the bench's events: warm (the attach check) or bench (event `turn` of the measured run). */
function onBench(w: number, mode: string, turn: number, at: number): void {
  if (mode === 'warm') {
    if (warmed[w]) return;
    warmed[w] = 1;
    if (++warm === o.readers && !attachedSent) {
      attachedSent = true;
      cpuAtAttach.v = ownCpuSeconds();
      emit('attached');
    }
  } else if (mode === 'bench' && Number.isNaN(arrivals[w * o.count + turn]!)) {
    arrivals[w * o.count + turn] = at;
    got++;
    maybeDone();
  }
}

function report(): void {
  if (doneSent) return;
  doneSent = true;
  emit('done', { arrivals: f64ToBase64(arrivals), delivered: got, closed_early: closed, early_status: earlyStatus[0], cpu_s: Math.round((ownCpuSeconds() - cpuAtAttach.v) * 100) / 100 });
}
const maybeDone = (): void => {
  if (got + closed * o.count >= o.readers * o.count) report();
};

let finish: () => Promise<void>;
if (o.mode === 'grpc') {
  const clients = grpcChannels(o.target!, Math.min(o.channels, o.readers));
  const watches: Watch[] = Array.from({ length: o.readers }, (_, w) =>
    openWatch(clients[w % clients.length]!, o.taskId, o.afterSeq, (e) => {
      if (e.event?.$case === 'workerPhase') onBench(w, e.event.value.mode, e.event.value.turn, monoMs());
    }));
  for (const w of watches) {
    void w.ended.then((end) => {
      // Closed before it had every event (e.g. RESOURCE_EXHAUSTED for a watcher that fell behind).
      if (end.code !== 0 && !doneSent) {
        closed++;
        earlyStatus.push(`${end.code} ${end.details}`);
        maybeDone();
      }
    });
  }
  finish = async () => {
    await Promise.race([Promise.all(watches.map((w) => w.ended)), new Promise((r) => setTimeout(r, 5_000))]);
    closeChannels(clients);
  };
} else {
  const conns = Array.from({ length: o.readers }, () => new Redis(o.redisUrl!, { connectionName: 'bench-raw-reader' }));
  await Promise.all(conns.map((c) => c.ping()));
  // Each reader: its own blocking XREAD from its own cursor, decoding the fields the gateway decodes.
  const loops = conns.map(async (conn, w) => {
    let cursor = `${o.afterSeq}-0`;
    while (true) {
      const reply = (await conn.xread('BLOCK', 0, 'STREAMS', o.stream!, cursor)) as [string, [string, string[]][]][] | null;
      const now = monoMs();
      for (const [, entries] of reply ?? []) {
        for (const [id, flat] of entries) {
          cursor = id;
          const f: Record<string, string> = {};
          for (let i = 0; i + 1 < flat.length; i += 2) f[flat[i]!] = flat[i + 1]!;
          if (f.t === 'task_completed') return;
          if (f.t !== 'worker_phase') continue;
          const p = JSON.parse(f.p ?? '{}') as { mode: string; turn: number };
          onBench(w, p.mode, p.turn, now);
        }
      }
    }
  });
  finish = async () => {
    await Promise.race([Promise.all(loops), new Promise((r) => setTimeout(r, 5_000))]);
    conns.forEach((c) => c.disconnect());
  };
}

for await (const c of commands<{ cmd: 'report' | 'finish' }>()) {
  if (c.cmd === 'report') report();
  else break;
}
await finish();
emit('finished');
process.exit(0);

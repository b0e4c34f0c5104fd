// Where a team task's Redis commands go: the overhead bench's one-worker task (POST /api/tasks, then WatchTeam to
// its end) on the real gateway and worker pool, with Redis's MONITOR open for one task after a warm-up. Prints every
// call in order (which connection made it; a script by its name, BullMQ's or the store's) with the commands it ran,
// counted as INFO commandstats counts them (the FCALL or EVALSHA and each command inside it), then the totals. Not a bench:
// nothing is timed, and one task on a quiet pool shows BullMQ polling a little more than 8 tasks in flight do.
//
//   npm exec -- node bench/trace-task.ts
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { Redis } from 'ioredis';
import { scriptNamesByFunction } from '@cadre/store';
import { BENCH_API_KEY, PROBE, grpcChannels, openWatch } from './support/harness.ts';
import { until } from './support/latency.ts';
import { startStack } from './support/stack.ts';
import { GOAL, INSTRUCTIONS } from './support/task-shape.ts';

const WARMUP = 4;
/** MONITOR stays open until Redis has been quiet this long after the task's end (BullMQ finishes the lead's job last). */
const QUIET_MS = 500;

interface Call {
  caller: string;
  call: string;
  commands: number;
}

/** Every script a call may run: the store's by function name (FCALL), BullMQ's by SHA (EVALSHA, `bull:<name>`). */
function scriptNames(): Map<string, string> {
  const names = scriptNamesByFunction();
  // BullMQ's script sources (its ESM build's imports have no file extensions, so Node loads only the CJS one).
  const bullScripts = createRequire(import.meta.url)('bullmq/dist/cjs/scripts/index.js') as Record<string, { name: string; content: string }>;
  for (const s of Object.values(bullScripts)) {
    names.set(createHash('sha1').update(s.content).digest('hex'), `bull:${s.name}`);
  }
  return names;
}

/** `commands` calls, merged where the same caller made the same call in a row (a MULTI's parts stay apart). */
function totals(calls: Call[], key: (c: Call) => string): [string, number, number][] {
  const by = new Map<string, [number, number]>();
  for (const c of calls) {
    const [n, cmds] = by.get(key(c)) ?? [0, 0];
    by.set(key(c), [n + 1, cmds + c.commands]);
  }
  return [...by].map(([k, [n, cmds]]): [string, number, number] => [k, n, cmds]).sort((a, b) => b[2] - a[2]);
}

// The worker with the probe but never a CPU profile: nothing here is timed.
const stack = await startStack({ worker: { nodeArgs: ['--import', PROBE], env: { WORKER_CONCURRENCY: '8' } } });
const { gateway } = stack;
const [client] = grpcChannels(gateway.target, 1);
const admin = new Redis(stack.redis.url);
const calls: (Call | string)[] = [];

async function runTask(i: number, mark: (what: string) => void): Promise<void> {
  const res = await fetch(`${gateway.url}/api/tasks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${BENCH_API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ workspace_id: 'bench', goal: `${GOAL} #${i}`, team: { workers: [{ role: 'writer', instructions: INSTRUCTIONS }] } }),
  });
  mark(`POST answered ${res.status}`);
  const { task } = (await res.json()) as { task: { task_id: string } };
  await openWatch(client!, task.task_id, 0).ended;
  mark('WatchTeam ended');
}

try {
  for (let i = 0; i < WARMUP; i++) await runTask(i, () => undefined);
  const names = scriptNames();
  const callers = new Map<string, string>();
  for (const line of (await admin.client('LIST') as string).split('\n')) {
    const addr = /addr=(\S+)/.exec(line)?.[1];
    if (addr) callers.set(addr, /name=(\S+)/.exec(line)?.[1] ?? 'bullmq-blocking');
  }
  const monitor = await admin.monitor();
  let lastLine = Date.now();
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    lastLine = Date.now();
    const last = calls.at(-1);
    // Commands a script runs come from "lua" right after its FCALL or EVALSHA.
    if (source === 'lua' && typeof last === 'object') {
      last.commands++;
      return;
    }
    const cmd = args[0]!.toLowerCase();
    const call = cmd === 'evalsha' || cmd === 'fcall' ? names.get(args[1]!) ?? `script ${args[1]!.slice(0, 8)}` : cmd;
    calls.push({ caller: callers.get(source) ?? source, call, commands: 1 });
  });
  let ended = false;
  await runTask(WARMUP, (what) => {
    calls.push(`--- ${what}`);
    ended = what === 'WatchTeam ended';
  });
  await until(async () => ended && Date.now() - lastLine > QUIET_MS, 'Redis to be quiet', 30_000, 50);
  await monitor.disconnect();

  console.log('One one-worker team task, call by call (commands: the call and every command its script ran):');
  for (const c of calls) console.log(typeof c === 'string' ? c : `${String(c.commands).padStart(4)}  ${c.caller.padEnd(24)} ${c.call}`);
  const all = calls.filter((c): c is Call => typeof c === 'object');
  console.log('\nBy caller and call (calls, commands):');
  for (const [k, n, cmds] of totals(all, (c) => `${c.caller.padEnd(24)} ${c.call}`)) console.log(`${String(cmds).padStart(4)}  ${k} ×${n}`);
  console.log(`\nTotal: ${all.reduce((sum, c) => sum + c.commands, 0)} commands`);
} finally {
  client!.close();
  admin.disconnect();
  await stack.stop();
}

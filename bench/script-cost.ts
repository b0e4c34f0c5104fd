// What a store script costs Redis, run the two ways: as an EVAL script with its includes inlined (EVALSHA, how the
// store ran them until the Functions library; the texts come from scriptsAsEval) and as the library's function
// (FCALL). One process, a private redis-server, nothing else: the heartbeat of an idle worker with nothing queued,
// and a turn's commit of one text delta (one event, as each of a turn's deltas is committed). Redis's own figure per
// call (INFO commandstats usec_per_call of evalsha / fcall), the sides alternating.
//
//   npm exec -- node bench/script-cost.ts
//   BENCH_CALLS=20000 BENCH_ROUNDS=2 npm exec -- node bench/script-cost.ts
import { Redis } from 'ioredis';
import { scriptNamesByFunction, scriptsAsEval, storeLibraryCode } from '@cadre/store';
import { startPrivateRedis } from './support/harness.ts';
import { loadText } from './support/machine.ts';
import { RedisStats, round } from './support/redis-stats.ts';
import { printTable } from './support/report.ts';
import { alternate, range } from './support/rounds.ts';

const CALLS = Number(process.env.BENCH_CALLS ?? 100_000);
const IN_FLIGHT = Number(process.env.BENCH_IN_FLIGHT ?? 16);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

const redisServer = await startPrivateRedis();
const redis = new Redis(redisServer.url);
const stats = new RedisStats(redisServer.url);

const functionOf = new Map([...scriptNamesByFunction()].map(([fn, script]) => [script, fn]));
const evalScripts = scriptsAsEval();
await redis.call('FUNCTION', 'LOAD', storeLibraryCode());

/** Each script's keys and arguments, as the store sends them. */
const sessionKeys = ['meta', 'events', 'transcript', 'calls'].map((k) => `bench:{s:1}:${k}`);
const delta = JSON.stringify([{ t: 'text_delta', p: JSON.stringify({ message_id: 'm1', delta: 'a few words of the answer ' }) }]);
const calls: Record<string, (string | number)[]> = {
  heartbeat: [1, 'bench:{w:ws}:workers',
    JSON.stringify({ worker_id: 'w1', workspace_id: 'ws', vm_id: 'vm', user_id: '', session_id: '', agent_id: '', status: 'ready', metadata: {} }),
    60_000, 3, '[]', 1000, 'bench:{w:ws}:appended', 86_400],
  commitTurn: [4, ...sessionKeys, 's1', 'lease-1', '[]', '[]', '{}', delta, 1000, 'bench:{s:1}:appended'],
};
// A running turn for the commits to be fenced by (lease-1); its events stream stays at 1,000 entries.
await redis.hset(sessionKeys[0]!, 'status', 'running', 'lease', 'lease-1', 'ttl', 3600);

/** `CALLS` calls, `IN_FLIGHT` at a time; Redis's µs per call of `command`. */
async function measure(command: 'evalsha' | 'fcall', script: string): Promise<{ us_per_call: number }> {
  const [numberOfKeys, ...args] = calls[script]!;
  const sha = command === 'evalsha' ? ((await redis.script('LOAD', evalScripts.get(script)!.lua)) as string) : '';
  const once = (): Promise<unknown> => (command === 'evalsha'
    ? redis.evalsha(sha, numberOfKeys!, ...args)
    : redis.fcall(functionOf.get(script)!, numberOfKeys!, ...args));
  await once();
  await stats.reset();
  let next = 0;
  await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
    while (next++ < CALLS) await once();
  }));
  const { calls: n, usec } = await stats.detail();
  if (n[command] !== CALLS) throw new Error(`${command} ${script}: ${n[command]} calls counted, ${CALLS} made`);
  return { us_per_call: round(usec[command]! / CALLS, 2) };
}

try {
  console.log(`${CALLS} calls a sample, ${IN_FLIGHT} in flight, ${ROUNDS} rounds; ${loadText()}`);
  const samples = await alternate(ROUNDS, {
    'heartbeat evalsha': () => measure('evalsha', 'heartbeat'),
    'heartbeat fcall': () => measure('fcall', 'heartbeat'),
    'commitTurn evalsha': () => measure('evalsha', 'commitTurn'),
    'commitTurn fcall': () => measure('fcall', 'commitTurn'),
  });
  for (const s of samples) console.log(`round ${s.round} ${s.side}: ${s.us_per_call} µs/call (load ${s.load.loadavg.join('/')}, machine busy ${s.machine_busy})`);
  printTable('Redis µs per call (INFO commandstats)', [
    ['script', 'EVALSHA (inlined)', 'FCALL (library)', 'load (1 min)'],
    ...['heartbeat', 'commitTurn'].map((script) => {
      const of = (way: string) => samples.filter((s) => s.side === `${script} ${way}`);
      return [script, range(of('evalsha').map((s) => s.us_per_call)), range(of('fcall').map((s) => s.us_per_call)),
        range(samples.filter((s) => s.side.startsWith(script)).map((s) => s.load.loadavg[0]), 2)];
    }),
  ]);
} finally {
  redis.disconnect();
  await stats.close();
  await redisServer.stop();
}

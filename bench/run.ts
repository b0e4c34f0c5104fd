// `npm run bench`: every bench, one after another, each in its own child process (so one's heap, sockets and
// timers cannot colour the next), then every headline figure as a range over all recorded runs of this bench
// version (bench/summary.ts). Figures, never pass/fail: the exit code says only whether every bench ran.
import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadText } from './support/machine.ts';
import { RESULTS_FILE } from './support/report.ts';

const ALL = ['fanout', 'overhead', 'submit', 'heartbeat', 'cancel', 'memory', 'parking', 'approvals', 'streaming', 'rpc', 'ws'];
const BENCHES = process.argv.length > 2 ? process.argv.slice(2) : ALL;
const here = (file: string): string => fileURLToPath(new URL(file, import.meta.url));
const runId = `suite-${new Date().toISOString()}`;

rmSync(RESULTS_FILE, { force: true });
const failed: string[] = [];
for (const name of BENCHES) {
  console.log(`\n=== ${name} (${loadText()})`);
  const started = performance.now();
  const run = spawnSync(process.execPath, [here(`./${name}.bench.ts`)], { stdio: 'inherit', timeout: 600_000, env: { ...process.env, BENCH_RUN_ID: runId } });
  console.log(`=== ${name}: ${((performance.now() - started) / 1000).toFixed(1)} s, ${loadText()}${run.status === 0 ? '' : ` (FAILED: ${run.error?.message ?? `exit ${run.status ?? run.signal}`})`}`);
  if (run.status !== 0) failed.push(name);
}
spawnSync(process.execPath, [here('./summary.ts')], { stdio: 'inherit' });
if (failed.length > 0) {
  console.error(`\nbenches that did not finish: ${failed.join(', ')}`);
  process.exitCode = 1;
}

// The log destination against a real pipe that its reader stops reading: the logging process must go on (no
// busy-wait on the event loop), drop what does not fit its bounded buffer, count every dropped line exactly, and
// still exit when the reader never comes back.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';

const LIB = new URL('./index.ts', import.meta.url).href;
const TOTAL = 20_000;
const children: ChildProcessWithoutNullStreams[] = [];
afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
});

/**
 * A process that logs TOTAL lines of ~1 KB (far more than a pipe plus the buffer hold), yielding to its event loop
 * now and then, and reports on stderr when it is done. `exit` ends it at once afterwards (the flush at exit must
 * give up on a pipe nobody reads); otherwise it lets its buffer drain.
 */
function burst(mode: 'drain' | 'exit'): ChildProcessWithoutNullStreams {
  const code = `
    import { createLogger, createMetricsRegistry, droppedLogLines } from ${JSON.stringify(LIB)};
    const logger = createLogger({ name: 'burst' });
    const registry = createMetricsRegistry('burst');
    const pad = 'x'.repeat(1000);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    for (let i = 0; i < ${TOTAL}; i++) {
      logger.info({ i, pad }, 'burst');
      if (i % 1000 === 999) await new Promise((resolve) => setImmediate(resolve));
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
    clearInterval(timer);
    const metric = await registry.getSingleMetricAsString('cadre_log_lines_dropped_total');
    process.stderr.write(JSON.stringify({ done: true, dropped: droppedLogLines(), ticks, metric }) + '\\n');
    if (${JSON.stringify(mode)} === 'exit') process.exit(0);
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['pipe', 'pipe', 'pipe'] });
  children.push(child);
  return child;
}

async function report(child: ChildProcessWithoutNullStreams): Promise<{ dropped: number; ticks: number; metric: string }> {
  let err = '';
  for await (const chunk of child.stderr) {
    err += String(chunk);
    const line = err.split('\n').find((l) => l.startsWith('{"done"'));
    if (line) return JSON.parse(line);
  }
  throw new Error(`the logging process ended without reporting:\n${err}`);
}

describe('standard-output log destination', () => {
  it('keeps the event loop running on a pipe nobody reads, drops what does not fit, and counts it exactly', async () => {
    const child = burst('drain');
    child.stdout.pause(); // the reader stops reading: the pipe fills
    const { dropped, ticks, metric } = await report(child);
    // Its timers kept firing while it logged into a full pipe, and it finished: nothing blocked it.
    expect(ticks).toBeGreaterThan(0);
    expect(dropped).toBeGreaterThan(0);
    expect(dropped).toBeLessThan(TOTAL);
    expect(metric).toContain(`cadre_log_lines_dropped_total{app="burst"} ${dropped}`);

    // The reader comes back: every line that was kept arrives whole, and a notice says how many are missing.
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stdout.resume();
    const [exitCode] = await once(child, 'exit');
    expect(exitCode).toBe(0);
    const lines = out.trimEnd().split('\n').map((l) => JSON.parse(l) as { msg: string; i?: number; droppedLines?: number });
    const kept = lines.filter((l) => l.msg === 'burst');
    const notices = lines.filter((l) => l.droppedLines !== undefined);
    expect(kept.length + dropped).toBe(TOTAL);
    expect(notices.reduce((sum, n) => sum + n.droppedLines!, 0)).toBe(dropped);
    // In order, first lines first: what is dropped is what arrived while the buffer was full.
    expect(kept.map((l) => l.i)).toEqual([...kept.map((l) => l.i!)].sort((a, b) => a - b));
    expect(kept[0]!.i).toBe(0);
  });

  it('exits when the reader never reads again (the flush at exit gives up)', async () => {
    const child = burst('exit');
    child.stdout.pause();
    const exited = once(child, 'exit');
    const { dropped } = await report(child);
    expect(dropped).toBeGreaterThan(0);
    const [exitCode] = await exited;
    expect(exitCode).toBe(0);
    child.stdout.destroy();
  });
});

import pc from 'picocolors';

/** How `cadre` exits: scripts can tell a failed or cancelled task from a CLI or API problem. */
export const EXIT = { ok: 0, error: 1, usage: 2, taskFailed: 3, taskCancelled: 4 } as const;

/**
 * The reader of the CLI's output went away (`cadre task list | head -1`): end at once, quietly, with exit 0, as
 * Unix tools that lose their reader do; a watch's stream ends with the process. Always 0: the failed write is
 * reported a turn later, when a watch may have already set its task's code. Other write errors stay loud.
 */
export function exitQuietlyWhenReaderGoes(stream: NodeJS.WriteStream): void {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err;
    process.exit(EXIT.ok);
  });
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

/** Left-aligned columns; colour is added after padding so escape codes do not skew widths. */
export function printTable(headers: string[], rows: string[][], colour: ((cell: string, column: number) => string) | null = null): void {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[], paint: (s: string, i: number) => string) => cells.map((c, i) => paint(c.padEnd(widths[i]!), i)).join('  ').trimEnd();
  process.stdout.write(`${line(headers, (s) => pc.bold(s))}\n`);
  for (const r of rows) process.stdout.write(`${line(r, (s, i) => (colour ? colour(s, i) : s))}\n`);
}

export function statusColour(status: string): string {
  const s = status.trim();
  const paint = s === 'completed' ? pc.green : ['failed', 'cancelled', 'stopped'].includes(s) ? pc.red : s === 'paused' ? pc.yellow : pc.cyan;
  return paint(status);
}

export const dash = (v: unknown): string => (v === null || v === undefined || v === '' ? '—' : String(v));

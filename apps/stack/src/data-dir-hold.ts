// One stack per data directory: `npm start` holds its data dir through `stack.json` in it, naming the stack's pid,
// its gateway URL and its private redis-server (pid, port). A second start on the same dir is refused while that
// pid is a live stack; a record left by a stack that died (kill -9) is taken over, and tells what it left running.
import { linkSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isProcessRunning } from '@cadre/lifecycle';

const STACK_ENTRY = 'apps/stack/src/main.ts';

export interface StackRecord {
  pid: number;
  gateway_url: string;
  /** The private redis-server the stack started; absent with REDIS_URL (or before it started). */
  redis?: { pid: number; port: number };
}

export type HoldOutcome =
  | { held: DataDirHold; left?: StackRecord }
  | { heldBy: StackRecord };

/**
 * Whether `pid` is a running stack: alive, and (where /proc shows it) running the stack's entry, so that a process
 * that reused a dead stack's pid does not keep its data dir held.
 */
function isRunningStack(pid: number): boolean {
  if (!isProcessRunning(pid)) return false;
  let cmdline: string;
  try {
    cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return true;
  }
  return cmdline.includes(STACK_ENTRY);
}

function readRecord(file: string): StackRecord | undefined {
  try {
    const record = JSON.parse(readFileSync(file, 'utf8')) as StackRecord;
    return Number.isInteger(record.pid) ? record : undefined;
  } catch {
    return undefined;
  }
}

export class DataDirHold {
  private record: StackRecord;
  private readonly file: string;
  private readonly dataDir: string;

  constructor(dataDir: string, record: StackRecord) {
    this.dataDir = dataDir;
    this.file = join(dataDir, 'stack.json');
    this.record = record;
  }

  get gatewayUrl(): string {
    return this.record.gateway_url;
  }

  /** Records the private redis-server (again after a restart): the next start stops it if we die with it running. */
  recordRedis(redis: { pid: number; port: number }): void {
    this.record = { ...this.record, redis: { pid: redis.pid, port: redis.port } };
    const temp = `${this.file}.${process.pid}`;
    writeFileSync(temp, `${JSON.stringify(this.record)}\n`, { mode: 0o600 });
    renameSync(temp, this.file);
  }

  /**
   * Synchronous, for process 'exit': drops the hold, and `gateway-url` if it still names our gateway (so the CLI
   * never points at a stopped one); what another stack wrote is left alone.
   */
  release(): void {
    const gatewayUrlFile = join(this.dataDir, 'gateway-url');
    try {
      if (readFileSync(gatewayUrlFile, 'utf8').trim() === this.record.gateway_url) rmSync(gatewayUrlFile);
    } catch {
      // Not written yet (or already gone).
    }
    if (readRecord(this.file)?.pid === process.pid) rmSync(this.file, { force: true });
  }

  /** Takes `dataDir` for this process, unless a running stack holds it. */
  static take(dataDir: string, gatewayUrl: string): HoldOutcome {
    mkdirSync(dataDir, { recursive: true });
    const file = join(dataDir, 'stack.json');
    const record: StackRecord = { pid: process.pid, gateway_url: gatewayUrl };
    // Written aside and linked into place: the link fails if the file exists, and a reader never sees it half written.
    const temp = `${file}.${process.pid}`;
    writeFileSync(temp, `${JSON.stringify(record)}\n`, { mode: 0o600 });
    let left: StackRecord | undefined;
    try {
      for (;;) {
        try {
          linkSync(temp, file);
          return { held: new DataDirHold(dataDir, record), left };
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        }
        const holder = readRecord(file);
        if (holder !== undefined && holder.pid !== process.pid && isRunningStack(holder.pid)) return { heldBy: holder };
        // Left by a stack that is gone (or unreadable): take it over.
        left = holder ?? left;
        rmSync(file, { force: true });
      }
    } finally {
      rmSync(temp, { force: true });
    }
  }
}

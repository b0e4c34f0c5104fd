import { writeSync } from 'node:fs';
import { pino } from 'pino';

/** Bytes of log lines held while standard output is not keeping up; a line that would pass this is dropped. */
export const LOG_BUFFER_BYTES = 4 * 1024 * 1024;
/** How long the last flush at exit may wait for a full pipe before it gives the rest up. */
const EXIT_FLUSH_MS = 1_000;

type Destination = ReturnType<typeof pino.destination>;

let destination: Destination | undefined;
let droppedLines = 0;
let unreportedDrops = 0;

/** Log lines dropped by this process so far because standard output was not keeping up (or was gone). */
export function droppedLogLines(): number {
  return droppedLines;
}

/**
 * The process's one standard-output destination for pino: pino's own asynchronous destination (sonic-boom), so a
 * full pipe never blocks the event loop — writes wait in a buffer of at most LOG_BUFFER_BYTES, and a line that does
 * not fit is dropped and counted (`cadre_log_lines_dropped_total`, and one notice line once output flows again).
 */
export function stdoutDestination(): Destination {
  if (destination) return destination;
  // Reading process.stdout makes a pipe non-blocking (libuv), so a full pipe answers EAGAIN — retried later from a
  // timer — instead of parking a thread, and the flush at exit cannot hang on it.
  const fd = process.stdout.fd;
  const stream = pino.destination({ dest: fd, sync: false, minLength: 0, maxLength: LOG_BUFFER_BYTES });
  stream.on('drop', (data: string | Buffer) => {
    const lines = countLines(data);
    droppedLines += lines;
    unreportedDrops += lines;
  });
  // Once the buffer has emptied, say how many lines are missing at this point of the log (an empty buffer always
  // has room for the notice).
  stream.on('drain', () => {
    if (unreportedDrops === 0) return;
    const lines = unreportedDrops;
    unreportedDrops = 0;
    stream.write(`${JSON.stringify({ level: 40, time: new Date().toISOString(), pid: process.pid, droppedLines: lines, msg: 'log lines dropped: standard output was not keeping up' })}\n`);
  });
  // pino's own handler turns EPIPE (the reader is gone) into silence and re-raises anything else; either way
  // nothing more can be written, so from here on every line is counted as dropped instead.
  stream.on('error', () => {
    stream.write = (data: string) => {
      droppedLines += countLines(data);
      return true;
    };
    stream.flushSync = () => undefined;
  });
  stream.flushSync = () => flushAtExit(stream, fd);
  destination = stream;
  return stream;
}

/**
 * pino flushes the buffer synchronously when the process exits. sonic-boom's own flushSync waits for ever on a full
 * pipe nobody reads and retries EPIPE (a parent that died) for ever, which leaves an exiting process spinning; this
 * one gives up after EXIT_FLUSH_MS, or at once on any other error, and counts what it could not write.
 */
function flushAtExit(stream: Destination, fd: number): void {
  // sonic-boom's buffer (utf8 mode, as pino.destination makes it): the chunk being written asynchronously, if any,
  // is left to that write, as sonic-boom's own flushSync does.
  const internal = stream as unknown as { _bufs: string[]; _writingBuf: string; _writing: boolean; _len: number };
  const pending = (internal._writing ? '' : internal._writingBuf) + internal._bufs.join('');
  internal._bufs = [];
  internal._writingBuf = '';
  internal._len = 0;
  let bytes = Buffer.from(pending);
  const deadline = Date.now() + EXIT_FLUSH_MS;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  while (bytes.length > 0) {
    try {
      bytes = bytes.subarray(writeSync(fd, bytes));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if ((code !== 'EAGAIN' && code !== 'EBUSY') || Date.now() >= deadline) break;
      Atomics.wait(pause, 0, 0, 10); // only at exit, when there is no event loop left to block
    }
  }
  if (bytes.length > 0) droppedLines += countLines(bytes.toString());
}

function countLines(data: string | Buffer): number {
  const text = typeof data === 'string' ? data : data.toString();
  let lines = 0;
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) lines++;
  return Math.max(lines, 1);
}

import { randomUUID } from 'node:crypto';
import net from 'node:net';
import type { Redis } from 'ioredis';

/**
 * The commands the server ran for `client` during `step`, by name (lower case), counted as INFO commandstats counts
 * them: each of its calls, and each command a script it called ran. Read from the server's MONITOR: only `client`'s
 * calls and the "lua" lines that follow them, so whatever else runs on the server meanwhile (BullMQ's polling, a
 * sweeper, another client) neither adds to the counts nor is needed for them. `admin` (another connection to the
 * same server) says where the server is and sends the marker that ends the reading.
 */
export async function commandsOf(admin: Redis, client: Redis, step: () => Promise<unknown>, markerTimeoutMs = 10_000): Promise<Record<string, number>> {
  const addr = /\baddr=(\S+)/.exec((await client.call('CLIENT', 'INFO')) as string)![1]!;
  const counts: Record<string, number> = {};
  const marker = `commands-of-${randomUUID()}`;
  let markerSeen!: () => void;
  let lost!: (err: Error) => void;
  const allSeen = new Promise<void>((resolve, reject) => {
    markerSeen = resolve;
    lost = reject;
  });
  // The MONITOR connection may be lost during the step, before anything awaits allSeen.
  allSeen.catch(() => undefined);
  // Whether the last call seen was `client`'s: the commands a script runs come from "lua", right after its call.
  let theirs = false;
  const monitor = await openMonitor(admin, (source, command, args) => {
    if (source !== 'lua') theirs = source === addr;
    if (theirs) counts[command] = (counts[command] ?? 0) + 1;
    else if (command === 'echo' && args === ` "${marker}"`) markerSeen();
  }, (err) => lost(new Error(`commandsOf: the MONITOR connection was lost before the step's end was seen (${err.message})`)));
  let timer: NodeJS.Timeout | undefined;
  try {
    await step();
    // MONITOR lists commands in the order the server ran them: a marker sent after the step comes after all of it.
    await admin.echo(marker);
    await Promise.race([allSeen, new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`commandsOf: MONITOR did not list the end marker within ${markerTimeoutMs} ms of sending it`)), markerTimeoutMs);
    })]);
  } finally {
    clearTimeout(timer);
    monitor.destroy();
  }
  return counts;
}

/**
 * MONITOR on a socket of its own, each line handed to `onLine` (the caller's address or "lua", the command, the rest
 * of the line); resolves once it is on, and from then on calls `onLost` if the socket fails or closes (also when the
 * caller destroys it). Not ioredis's monitor(): on a busy server, lines that come in the read that brings MONITOR's
 * +OK are taken for replies to nothing ("Command queue state error").
 */
function openMonitor(admin: Redis, onLine: (source: string, command: string, args: string) => void, onLost: (err: Error) => void): Promise<net.Socket> {
  const { host, port, path } = admin.options;
  const socket = path ? net.connect(path) : net.connect(port!, host);
  return new Promise((resolve, reject) => {
    let buffered = '';
    let on = false;
    socket.once('error', reject);
    socket.once('close', () => reject(new Error('commandsOf: the MONITOR connection closed before MONITOR was on')));
    socket.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('latin1');
      for (let end = buffered.indexOf('\r\n'); end >= 0; end = buffered.indexOf('\r\n')) {
        const line = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        if (!on) {
          if (line !== '+OK') return reject(new Error(`MONITOR refused: ${line}`));
          on = true;
          socket.off('error', reject).on('error', onLost).on('close', () => onLost(new Error('the server closed it')));
          resolve(socket);
          continue;
        }
        // +<time> [<db> <address>|lua] "<command>" "<arg>"… (arguments escaped: a line holds no CR LF of theirs)
        const m = /^\+\S+ \[\d+ ([^\]]+)\] "([^"]*)"(.*)$/.exec(line);
        if (m) onLine(m[1]!, m[2]!.toLowerCase(), m[3]!);
      }
    });
    socket.write('MONITOR\r\n');
  });
}

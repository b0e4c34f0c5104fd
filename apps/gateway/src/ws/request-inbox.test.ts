// A burst of frames that reaches the socket in one TCP read, over a real ws server and a raw TCP client.
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import { waitUntil } from '@cadre/testing';
import { RequestInbox } from './request-inbox.ts';

const CAP = 32;
const BURST = 1_000;

let server: WebSocketServer;
let port: number;
const accepted: WebSocket[] = [];
const clients: net.Socket[] = [];

beforeAll(async () => {
  server = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  server.on('connection', (socket) => accepted.push(socket));
  await new Promise<void>((resolve) => server.once('listening', resolve));
  port = (server.address() as net.AddressInfo).port;
});
afterAll(async () => {
  for (const client of clients) client.destroy();
  await new Promise((resolve) => server.close(resolve));
});

/** A client text frame (RFC 6455 §5.2) of a short payload, masked with a zero key, as every client frame is masked. */
function clientFrame(text: string): Buffer {
  const payload = Buffer.from(text);
  if (payload.length > 125) throw new Error('short payloads only');
  return Buffer.concat([Buffer.from([0x81, 0x80 | payload.length, 0, 0, 0, 0]), payload]);
}

/** Opens a WebSocket over a raw TCP socket, so the test decides how its frames are written. */
async function rawClient(): Promise<net.Socket> {
  const socket = net.connect(port, '127.0.0.1');
  clients.push(socket);
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.write(`GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${Buffer.alloc(16).toString('base64')}\r\nSec-WebSocket-Version: 13\r\n\r\n`);
  await new Promise<void>((resolve) => socket.once('data', (head: Buffer) => head.toString().startsWith('HTTP/1.1 101') && resolve()));
  return socket;
}

describe('RequestInbox', () => {
  it('a burst in one write: exactly the cap is queued, the rest waits apart, and all are handled in order', async () => {
    const client = await rawClient();
    const socket = await waitUntil('the server to accept the socket', () => accepted.at(-1));

    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const handled: string[] = [];
    const flow: string[] = [];
    const inbox = new RequestInbox({
      maxQueued: CAP,
      maxChars: 1024 * 1024,
      handle: async (raw) => {
        await held;
        handled.push(raw!);
      },
      pause: () => {
        flow.push('pause');
        socket.pause();
      },
      resume: () => {
        flow.push('resume');
        socket.resume();
      },
    });
    let mostQueued = 0;
    let arrived = 0;
    socket.on('message', (data) => {
      arrived++;
      inbox.offer(data.toString());
      mostQueued = Math.max(mostQueued, inbox.size.queued);
    });

    const sent = Array.from({ length: BURST }, (_, i) => String(i));
    client.write(Buffer.concat(sent.map(clientFrame)));
    // ws parses the read whole although the cap paused the socket: more than the cap arrives.
    await waitUntil('more frames than the cap to arrive', () => arrived > CAP);
    expect(mostQueued).toBe(CAP);
    expect(inbox.size).toEqual({ queued: CAP, beyond: arrived - CAP });
    expect(flow).toEqual(['pause']);

    release();
    await waitUntil('every frame of the burst to be handled', () => handled.length === BURST);
    expect(handled).toEqual(sent);
    expect(mostQueued).toBe(CAP);
    expect(inbox.size).toEqual({ queued: 0, beyond: 0 });
    // Read again only once nothing waits apart any more.
    expect(flow.at(-1)).toBe('resume');
  });
});

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

/** Pauses and resumes the server's socket, recording each in `flow`. */
function flowControl(socket: WebSocket, flow: string[]): { pause(): void; resume(): void } {
  return {
    pause: () => {
      flow.push('pause');
      socket.pause();
    },
    resume: () => {
      flow.push('resume');
      socket.resume();
    },
  };
}

describe('RequestInbox', () => {
  it('a burst in one write: exactly the cap is queued, the rest waits apart, and all are handled in order', async () => {
    const client = await rawClient();
    const socket = await waitUntil('the server to accept the socket', () => accepted.at(-1));

    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const handled: string[] = [];
    const flow: string[] = [];
    const failures: unknown[] = [];
    const inbox = new RequestInbox({
      maxQueued: CAP,
      maxChars: 1024 * 1024,
      handle: async (raw) => {
        await held;
        handled.push(raw!);
      },
      onError: (err) => failures.push(err),
      ...flowControl(socket, flow),
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
    expect(failures).toEqual([]);
  });

  it('a request whose handling rejects is reported, and the requests behind it are still handled in order', async () => {
    const client = await rawClient();
    const socket = await waitUntil('the server to accept the socket', () => accepted.at(-1));
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const handled: string[] = [];
      const flow: string[] = [];
      const failures: string[] = [];
      const inbox = new RequestInbox({
        // Below the burst, so the socket is paused and must be read again after the rejection.
        maxQueued: 2,
        maxChars: 1024 * 1024,
        handle: async (raw) => {
          if (raw === 'bad') throw new Error('handling bad failed');
          handled.push(raw!);
        },
        onError: (err) => failures.push((err as Error).message),
        ...flowControl(socket, flow),
      });
      socket.on('message', (data) => inbox.offer(data.toString()));

      client.write(Buffer.concat(['a', 'bad', 'c', 'd', 'e', 'f'].map(clientFrame)));
      await waitUntil('the requests after the rejected one to be handled', () => handled.length === 5);
      expect(handled).toEqual(['a', 'c', 'd', 'e', 'f']);
      expect(failures).toEqual(['handling bad failed']);
      expect(flow[0]).toBe('pause');
      expect(flow.at(-1)).toBe('resume');
      // The socket is read again: a later frame is handled too.
      client.write(clientFrame('g'));
      await waitUntil('a frame sent after the burst to be handled', () => handled.length === 6);
      expect(handled.at(-1)).toBe('g');
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});

// One TCP port for REST and gRPC. Every accepted connection is classified by its first bytes: HTTP/2
// clients (gRPC) must open with the fixed connection preface, HTTP/1.1 clients never can, so a
// byte-prefix check routes each socket without TLS/ALPN or a second port.
import net from 'node:net';
import type http from 'node:http';
import type { ConnectionInjector } from '@grpc/grpc-js';

/** RFC 9113 §3.4: the first 24 bytes a client sends on a prior-knowledge (h2c) HTTP/2 connection. */
const HTTP2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export interface OnePortOptions {
  port: number;
  host?: string;
  httpServer: http.Server;
  grpcInjector: Pick<ConnectionInjector, 'injectConnection'>;
  /** A connection that sends too few bytes to classify within this time is dropped (default 60 s,
   * like Node's headersTimeout), so idle sockets cannot pile up before any server owns them. */
  peekTimeoutMs?: number;
}

export interface OnePortListener {
  /** The bound port (the real one when asked for port 0). */
  port: number;
  /** Stops accepting and drops connections still being classified. Routed connections belong to the
   * HTTP and gRPC servers: close those afterwards to end them. */
  close(): Promise<void>;
}

export async function listenOnePort(opts: OnePortOptions): Promise<OnePortListener> {
  // Sockets whose first bytes have not decided their protocol yet; nobody else knows about them.
  const peeking = new Set<net.Socket>();
  const listener = net.createServer((socket) => {
    peeking.add(socket);
    routeByPreface(socket, opts.peekTimeoutMs ?? 60_000, (protocol, firstBytes) => {
      peeking.delete(socket);
      if (protocol === 'closed') return void socket.destroy();
      // Give back what we read, so the chosen server parses the stream from its first byte.
      socket.unshift(firstBytes);
      if (protocol === 'http2') {
        // Node's HTTP/2 session drains bytes already buffered on the socket itself.
        opts.grpcInjector.injectConnection(socket);
      } else {
        // Node's HTTP/1 server attaches its readers but leaves a paused socket paused; resuming after
        // the handoff delivers the unshifted bytes to it first, then the rest of the stream.
        opts.httpServer.emit('connection', socket);
        socket.resume();
      }
    });
  });

  await new Promise<void>((resolve, reject) => {
    listener.once('error', reject);
    listener.listen(opts.port, opts.host, () => {
      listener.off('error', reject);
      resolve();
    });
  });

  // Node's http.Server starts tracking connections (headersTimeout/requestTimeout enforcement,
  // closeIdleConnections) on its own 'listening' event, which it never gets since it binds nothing.
  opts.httpServer.emit('listening');

  const address = listener.address() as net.AddressInfo;
  return {
    port: address.port,
    close: async () => {
      // Sockets still peeking have no owner that would ever end them, so drop them here.
      for (const socket of peeking) socket.destroy();
      peeking.clear();
      // The listening handle closes synchronously, so accepting stops now. net.Server's close callback
      // would also wait for every routed connection (WatchTeam streams, HTTP keep-alives), which only
      // end when the gRPC and HTTP servers close, so waiting for it here would stall a shutdown.
      if (listener.listening) listener.close(() => {});
    },
  };
}

type Protocol = 'http2' | 'http1' | 'closed';

/** Reads until the bytes either complete the HTTP/2 preface or stop matching it; TCP may deliver the
 * preface in several chunks, so one short read decides nothing. Leaves the socket paused. */
function routeByPreface(
  socket: net.Socket,
  timeoutMs: number,
  decide: (protocol: Protocol, firstBytes: Buffer) => void,
): void {
  let received = Buffer.alloc(0);

  const settle = (protocol: Protocol) => {
    socket.off('data', onData);
    socket.off('end', onClosed);
    socket.off('close', onClosed);
    socket.off('timeout', onClosed);
    socket.off('error', onError);
    socket.setTimeout(0); // the chosen server applies its own timeouts
    // Stop the flow so no bytes are emitted between our listener leaving and the next server's arriving.
    socket.pause();
    decide(protocol, received);
  };
  const onData = (chunk: Buffer) => {
    received = Buffer.concat([received, chunk]);
    const compared = Math.min(received.length, HTTP2_PREFACE.length);
    const matchesSoFar = received.subarray(0, compared).equals(HTTP2_PREFACE.subarray(0, compared));
    if (!matchesSoFar) settle('http1');
    else if (received.length >= HTTP2_PREFACE.length) settle('http2');
  };
  // Ending, closing or idling out while every byte so far still matches the preface: no complete
  // request of either kind can follow, so there is nothing to route.
  const onClosed = () => settle('closed');
  // 'close' follows an error; without a listener an ECONNRESET here would crash the process.
  const onError = () => {};

  socket.setTimeout(timeoutMs);
  socket.on('data', onData);
  socket.once('end', onClosed);
  socket.once('close', onClosed);
  socket.once('timeout', onClosed);
  socket.on('error', onError);
}

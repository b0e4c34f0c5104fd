import net from 'node:net';
import type { EmbeddedRedis } from '@cadre/embedded-redis';
import { waitUntil } from './wait.ts';

/**
 * kill -9 a test Redis server (it stays down) and keep its port, until `release()`: connections to it are closed at
 * once, as to a dead host. Left free, the port could be taken by a redis-server of another test running beside this
 * one (seen on shared runners), or be the local port the OS gives a client reconnecting to it (a TCP
 * self-connect): a client still trying the dead server's address would then be answered by something else.
 */
export async function killHoldingPort(node: EmbeddedRedis): Promise<{ release(): void }> {
  node.kill('SIGKILL');
  // A new server per try: one that failed to listen is closed with its listeners, not tried again.
  const holder = await waitUntil(`port ${node.port} to be released after the kill`, () => new Promise<net.Server | false>((resolve) => {
    const server = net.createServer((socket) => socket.destroy());
    server.once('error', () => resolve(false));
    server.listen(node.port, '127.0.0.1', () => resolve(server));
  }), { timeoutMs: 10_000, everyMs: 10 });
  return { release: () => holder.close() };
}

import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { listenProblem } from '@cadre/config';

/** The address a local client uses to reach a server bound to `host` (wildcards become loopback). */
export function loopbackFor(host: string): string {
  if (host === '0.0.0.0') return '127.0.0.1';
  if (host === '::') return '[::1]';
  return host.includes(':') ? `[${host}]` : host;
}

/**
 * Polls `GET url` until it answers 200. 'aborted' when `signal` fires first (the stack is stopping, e.g. because
 * the gateway exited), 'timeout' after `timeoutMs`.
 */
export async function waitForReady(url: string, timeoutMs: number, signal: AbortSignal): Promise<'ready' | 'timeout' | 'aborted'> {
  const deadline = Date.now() + timeoutMs;
  while (!signal.aborted && Date.now() < deadline) {
    try {
      const res = await fetch(url, { signal: AbortSignal.any([signal, AbortSignal.timeout(1_000)]) });
      await res.body?.cancel();
      if (res.status === 200) return 'ready';
    } catch {
      // Not listening yet, or the poll timed out: try again.
    }
    await sleep(200, undefined, { signal }).catch(() => undefined);
  }
  return signal.aborted ? 'aborted' : 'timeout';
}

/**
 * Why the gateway could not listen on host:port (in use, not allowed, not an address here), found by binding it
 * for a moment; undefined when it is free. The gateway binds it for real a second later.
 */
export async function portUnavailable(port: number, host: string): Promise<string | undefined> {
  const probe = net.createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      probe.once('error', reject);
      probe.listen(port, host, resolve);
    });
    return undefined;
  } catch (err) {
    return listenProblem(err, { port, host });
  } finally {
    if (probe.listening) await new Promise((resolve) => probe.close(resolve));
  }
}

// The worker pool and the vm-agent answer probes on their metrics port, shaped as the gateway's: /healthz 200 while
// the process answers; /readyz 200 while it can take work, else 503 with a short reason — a worker still reaching
// Redis, whose Redis is gone (and 200 again once it is back) or that drains on SIGTERM; a vm-agent whose gateway
// does not answer.
import { afterEach, describe, expect, it } from 'vitest';
import { httpClient, startRestartableRedis, waitUntil, type RestartableRedis } from '@cadre/testing';
import { sessionEvents } from './support/session-client.ts';
import { TestStack, freePort } from './support/stack.ts';

const RUNS_KEY = 'probes-runs-key';
let stack: TestStack | undefined;
let redis: RestartableRedis | undefined;
let redisDown = false;

afterEach(async () => {
  if (redisDown) await redis?.restart();
  redisDown = false;
  await stack?.stop();
  stack = undefined;
});

async function probe(base: string, path: '/healthz' | '/readyz'): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${base}${path}`, { signal: AbortSignal.timeout(5_000) });
  return { status: res.status, body: await res.json() };
}

describe('worker pool probes', () => {
  it('/healthz 200; /readyz 200 when running, 503 while its Redis is stopped and 200 after, 503 while it drains on SIGTERM', async () => {
    redis = await startRestartableRedis();
    stack = await TestStack.start({ redis, workers: 0 });
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const worker = await stack.spawnWorkerProcess({ WORKER_METRICS_PORT: String(port), WORKER_METRICS_HOST: '127.0.0.1', CADRE_SHUTDOWN_GRACE_MS: '5000' });

    expect(await probe(base, '/healthz')).toEqual({ status: 200, body: { status: 'ok' } });
    expect(await probe(base, '/readyz')).toEqual({ status: 200, body: { status: 'ready' } });

    redis.kill();
    redisDown = true;
    await expect.poll(() => probe(base, '/readyz'), { timeout: 10_000 }).toEqual({ status: 503, body: { status: 'not_ready', reason: 'redis_unavailable' } });
    expect(await probe(base, '/healthz')).toEqual({ status: 200, body: { status: 'ok' } });
    await redis.restart();
    redisDown = false;
    await expect.poll(() => probe(base, '/readyz'), { timeout: 15_000 }).toEqual({ status: 200, body: { status: 'ready' } });

    // A turn streaming when the signal comes keeps the worker draining (up to its 5 s grace) while it is probed.
    const api = httpClient(stack.url);
    const created = await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'probes' });
    const sessionId = created.body.session.session_id;
    await api.post(`/api/sessions/${sessionId}/messages`, { content: 'Explain at length [[scripted:words=600]] [[scripted:chunk_delay=40]]' });
    await waitUntil('the answer to stream', async () => (await sessionEvents(stack!.url, sessionId)).some((e) => e.event_type === 'text_delta'));
    const exited = new Promise<number | null>((resolve) => worker.once('exit', resolve));
    worker.kill('SIGTERM');
    await expect.poll(() => probe(base, '/readyz'), { timeout: 5_000 }).toEqual({ status: 503, body: { status: 'not_ready', reason: 'draining' } });
    expect(await probe(base, '/healthz')).toEqual({ status: 200, body: { status: 'ok' } });
    expect(await exited).toBe(0);
  });

  it('answers while it still connects: /healthz 200, /readyz 503 starting until Redis is reached, then 200', async () => {
    redis = await startRestartableRedis();
    stack = await TestStack.start({ redis, workers: 0 });
    redis.kill();
    redisDown = true;
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const starting = stack.spawnWorkerProcess({ WORKER_METRICS_PORT: String(port), WORKER_METRICS_HOST: '127.0.0.1' });
    starting.catch(() => undefined); // awaited below; a test failing before that kills the process
    await expect.poll(() => probe(base, '/healthz').catch(() => undefined), { timeout: 15_000 }).toEqual({ status: 200, body: { status: 'ok' } });
    expect(await probe(base, '/readyz')).toEqual({ status: 503, body: { status: 'not_ready', reason: 'starting' } });
    await redis.restart();
    redisDown = false;
    await starting;
    await expect.poll(() => probe(base, '/readyz'), { timeout: 10_000 }).toEqual({ status: 200, body: { status: 'ready' } });
  });
});

describe('vm-agent probes', () => {
  it('/healthz 200; /readyz 200 while its heartbeats reach the gateway, 503 when the gateway does not answer', async () => {
    stack = await TestStack.start({ workers: 0, env: { RUNS_API_KEY: RUNS_KEY, RUNS_HEARTBEAT_INTERVAL_MS: '100' } });
    const [up, away] = [await freePort(), await freePort()];
    await stack.spawnVmAgent('probes', 'vm-up', { VM_AGENT_METRICS_PORT: String(up) });
    await stack.spawnVmAgent('probes', 'vm-away', { VM_AGENT_METRICS_PORT: String(away), CADRE_GATEWAY_URL: `http://127.0.0.1:${await freePort()}` });

    expect(await probe(`http://127.0.0.1:${up}`, '/healthz')).toEqual({ status: 200, body: { status: 'ok' } });
    await expect.poll(() => probe(`http://127.0.0.1:${up}`, '/readyz')).toEqual({ status: 200, body: { status: 'ready' } });
    expect(await probe(`http://127.0.0.1:${away}`, '/healthz')).toEqual({ status: 200, body: { status: 'ok' } });
    expect(await probe(`http://127.0.0.1:${away}`, '/readyz')).toEqual({ status: 503, body: { status: 'not_ready', reason: 'gateway_unreachable' } });
  });
});

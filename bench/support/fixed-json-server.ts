// The baselines for the heartbeat bench: a bare Fastify route answering a fixed JSON body of a heartbeat's size,
// in its own process like the gateway (and, like it, with bench/support/probe.ts loaded). Prints its port.
// With `{"redisUrl": …}` as its argument the route first makes one Redis round trip per request, as a heartbeat
// does: an EVALSHA of a small script (ROUTE_BEAT below: one hash field of a per-agent key written, a small array
// returned; the heartbeat script's shape, not its logic), over a connection like the gateway's heartbeat connection
// (connectRedis: no autopipelining), then answers the same fixed body.
import fastify from 'fastify';
import { connectRedis } from '@cadre/store';
import { argJson, emit } from './child.ts';

/**
 * KEYS[1] the agent's hash   ARGV[1] worker id   ARGV[2] status
 * Returns { worker id, Redis's time in ms, fields written }.
 */
const ROUTE_BEAT = `
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local written = redis.call('HSET', KEYS[1], 'status', ARGV[2], 'last_heartbeat_at', now)
return { ARGV[1], now, written }
`;

const body = {
  worker: { worker_id: 'agent-1', workspace_id: 'ws-1', vm_id: 'vm-1', user_id: null, session_id: null, status: 'ready', metadata: {}, last_heartbeat_at: '2026-11-22T00:00:00.000Z', current_run_id: null },
  assigned_run: null,
  control_commands: [],
  heartbeat_interval_ms: 5000,
};
const { redisUrl } = argJson<{ redisUrl?: string }>();
const redis = redisUrl ? connectRedis(redisUrl, 'bench-route-heartbeats') : undefined;
const sha = redis ? ((await redis.script('LOAD', ROUTE_BEAT)) as string) : '';
const app = fastify();
if (redis) {
  app.post<{ Body: { worker_id: string; status: string } }>('/api/runs/workers/heartbeat', async (req) => {
    await redis.evalsha(sha, 1, `bench-route:agent:${req.body.worker_id}`, req.body.worker_id, req.body.status);
    return body;
  });
} else {
  app.post('/api/runs/workers/heartbeat', async () => body);
}
await app.listen({ port: 0, host: '127.0.0.1' });
emit('listening', { port: (app.server.address() as { port: number }).port });
process.on('SIGTERM', () => void app.close().then(async () => {
  await redis?.quit();
  process.exit(0);
}));

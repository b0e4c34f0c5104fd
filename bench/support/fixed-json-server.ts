// The baseline for the heartbeat bench: a bare Fastify route answering a fixed JSON body of a heartbeat's size,
// in its own process like the gateway. Prints its port once listening.
import fastify from 'fastify';

const body = {
  worker: { worker_id: 'agent-1', workspace_id: 'ws-1', vm_id: 'vm-1', user_id: null, session_id: null, status: 'ready', metadata: {}, last_heartbeat_at: '2026-11-22T00:00:00.000Z', current_run_id: null },
  assigned_run: null,
  control_commands: [],
  heartbeat_interval_ms: 5000,
};
const app = fastify();
app.post('/api/runs/workers/heartbeat', async () => body);
await app.listen({ port: 0, host: '127.0.0.1' });
process.stdout.write(`listening ${(app.server.address() as { port: number }).port}\n`);
process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));

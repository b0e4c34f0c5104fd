// The baseline for the heartbeat bench: a bare Fastify route answering a fixed JSON body of a heartbeat's size,
// in its own process like the gateway (and, like it, with bench/support/probe.ts loaded). Prints its port.
import fastify from 'fastify';
import { emit } from './child.ts';

const body = {
  worker: { worker_id: 'agent-1', workspace_id: 'ws-1', vm_id: 'vm-1', user_id: null, session_id: null, status: 'ready', metadata: {}, last_heartbeat_at: '2026-11-22T00:00:00.000Z', current_run_id: null },
  assigned_run: null,
  control_commands: [],
  heartbeat_interval_ms: 5000,
};
const app = fastify();
app.post('/api/runs/workers/heartbeat', async () => body);
await app.listen({ port: 0, host: '127.0.0.1' });
emit('listening', { port: (app.server.address() as { port: number }).port });
process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));

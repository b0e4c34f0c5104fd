import { tracing } from './tracing.ts';
import { randomUUID } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { createModelClient } from '@cadre/agent';
import { onShutdown } from '@cadre/lifecycle';
import { createLogger, serveMetrics } from '@cadre/observability';
import { vmAgentConfig } from './config.ts';
import { GatewayClient } from './gateway-client.ts';
import { HeartbeatLoop } from './heartbeat.ts';
import { RunExecutor } from './run-executor.ts';
import { vmAgentMetrics } from './metrics.ts';

// Composition root: config → logger → gateway client → executor + heartbeat loop → drain on a signal.
const config = vmAgentConfig(process.env);
const logger = createLogger({ name: 'vm-agent', level: config.logLevel }).child({ workerId: config.workerId });
const missing = [
  ...(config.runsApiKey ? [] : ['RUNS_API_KEY']),
  ...(config.openaiBaseUrl ? [] : ['OPENAI_BASE_URL']),
  ...(config.openaiApiKey ? [] : ['OPENAI_API_KEY']),
];
if (missing.length > 0) {
  logger.fatal({ missing }, 'RUNS_API_KEY, OPENAI_BASE_URL and OPENAI_API_KEY are required');
  process.exit(1);
}
await mkdir(config.workdir, { recursive: true });

const metrics = vmAgentMetrics({ busy: () => executor.busy });
const client = new GatewayClient({ baseUrl: config.gatewayUrl, runsKey: config.runsApiKey!, onCall: metrics.onCall });
const model = createModelClient({ baseURL: config.openaiBaseUrl!, apiKey: config.openaiApiKey!, maxRetries: config.modelRetries });
let draining = false;
// Declared before the executor needs it: the executor acks through the loop.
const heartbeat: HeartbeatLoop = new HeartbeatLoop({
  client,
  logger,
  identity: {
    workspace_id: config.workspaceId,
    worker_id: config.workerId,
    vm_id: config.vmId,
    ...(config.userId !== undefined && { user_id: config.userId }),
    session_id: randomUUID(),
  },
  // `stopping` is neither `ready` nor `running`, so the gateway assigns nothing new while the lease of the
  // current run is still renewed.
  status: () => (draining ? 'stopping' : executor.busy ? 'running' : 'ready'),
  metadata: () => ({ agent: 'cadre-vm-agent', pid: process.pid, run_id: executor.currentRunId }),
  onResponse: (res) => executor.handle(res),
});
const executor = new RunExecutor({ client, model, logger, config, ack: (id) => heartbeat.ack(id), observer: metrics.observer, onRunEnded: metrics.onRunEnded });
const metricsServer = config.metricsPort > 0 ? await serveMetrics({ port: config.metricsPort, host: config.metricsHost, registry: metrics.registry }) : undefined;

heartbeat.start();
process.stdout.write(`vm-agent ${config.workerId} serving workspace ${config.workspaceId} via ${config.gatewayUrl}\n`);
logger.info({ workdir: config.workdir, model: config.model, metricsPort: config.metricsPort || undefined }, 'vm-agent started');

// Shutdown: take nothing new and let the current run finish within the grace period, still heartbeating so its
// lease holds. A run that does not finish in time is handed back, not failed: we abort it locally and stop
// heartbeating, its lease expires and the gateway requeues it (run-worker-lost, run-requeued) for another agent.
// Failing it with `error {reason: 'worker_shutdown'}` would be quicker but turns every deploy or scale-down into
// user-visible failures; the price of handing back is RUNS_WORKER_TTL_MS of delay and one of RUNS_MAX_ATTEMPTS.
onShutdown({
  exitWithParent: config.exitWithParent,
  log: (reason) => logger.info({ reason, runId: executor.currentRunId, graceMs: config.shutdownGraceMs }, 'vm-agent draining'),
  close: async () => {
    draining = true;
    executor.stopAccepting();
    if (!(await executor.whenIdle(config.shutdownGraceMs))) await executor.abandon();
    await heartbeat.stop();
    metricsServer?.close();
    logger.info('vm-agent stopped');
    await tracing.shutdown();
  },
});

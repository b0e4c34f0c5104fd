import { tracing } from './tracing.ts';
import { randomUUID } from 'node:crypto';
import { access, constants, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createModelClient } from '@cadre/agent';
import { configOrExit, exitForConfig, listenProblem } from '@cadre/config';
import { onShutdown } from '@cadre/lifecycle';
import { createLogger, serveMetrics, type Readiness } from '@cadre/observability';
import { vmAgentConfig } from './config.ts';
import { GatewayClient } from './gateway-client.ts';
import { HeartbeatLoop } from './heartbeat.ts';
import { RunExecutor } from './run-executor.ts';
import { vmAgentMetrics } from './metrics.ts';

// Composition root: config → logger → gateway client → executor + heartbeat loop → drain on a signal.
// Bad configuration ends the process with one line per problem naming the variable, no stack trace.
const config = configOrExit('vm-agent', () => vmAgentConfig(process.env));
const required = {
  RUNS_API_KEY: [config.runsApiKey, "the runs API key (x-windie-runs-key) of the gateway at CADRE_GATEWAY_URL"],
  OPENAI_BASE_URL: [config.openaiBaseUrl, 'the model server, e.g. http://127.0.0.1:8081/v1'],
  OPENAI_API_KEY: [config.openaiApiKey, "the model server's key (any value for one that checks none)"],
} as const;
const missing = Object.entries(required).filter(([, [value]]) => !value);
if (missing.length > 0) exitForConfig('vm-agent', missing.map(([name, [, what]]) => `${name}: required: ${what}`));
const logger = createLogger({ name: 'vm-agent', level: config.logLevel }).child({ workerId: config.workerId });
// Without VM_AGENT_WORKDIR, runs work in a directory of this process's own, never one shared by every checkout and
// agent on the machine; it is scratch space, removed when the agent stops.
const ownWorkdir = config.workdir === undefined;
const workdir = config.workdir ?? (await mkdtemp(join(tmpdir(), `cadre-vm-agent-${config.workerId.replace(/[^A-Za-z0-9._-]/g, '_')}-`)));
// A workdir it cannot create or write (a file on the path, no permission) is a configuration problem: one line.
await mkdir(workdir, { recursive: true })
  .then(() => access(workdir, constants.W_OK | constants.X_OK))
  .catch((err: NodeJS.ErrnoException) => {
    if (ownWorkdir) throw err;
    exitForConfig('vm-agent', [`VM_AGENT_WORKDIR: cannot use "${workdir}" as the runs' directory (${err.code ?? err.message}); it must be a directory the vm-agent can create or write`]);
  });

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
const executor = new RunExecutor({ client, model, logger, config: { ...config, workdir }, ack: (id) => heartbeat.ack(id), observer: metrics.observer, onRunEnded: metrics.onRunEnded });
// Ready while its heartbeats reach the gateway and it is not draining (it takes runs only then).
async function readiness(): Promise<Readiness> {
  if (draining) return { ready: false, reason: 'draining' };
  return heartbeat.reachable ? { ready: true } : { ready: false, reason: 'gateway_unreachable' };
}
const metricsServer =
  config.metricsPort > 0
    ? await serveMetrics({ port: config.metricsPort, host: config.metricsHost, registry: metrics.registry, readiness }).catch((err: unknown) => {
        const problem = listenProblem(err, { port: config.metricsPort, host: config.metricsHost, portVariable: 'VM_AGENT_METRICS_PORT', hostVariable: 'VM_AGENT_METRICS_HOST' });
        if (problem) exitForConfig('vm-agent', [problem]);
        throw err;
      })
    : undefined;

heartbeat.start();
process.stdout.write(`vm-agent ${config.workerId} serving workspace ${config.workspaceId} via ${config.gatewayUrl}\n`);
logger.info({ workdir, model: config.model, metricsPort: config.metricsPort || undefined }, 'vm-agent started');

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
    if (ownWorkdir) await rm(workdir, { recursive: true, force: true });
    logger.info('vm-agent stopped');
    await tracing.shutdown();
  },
});

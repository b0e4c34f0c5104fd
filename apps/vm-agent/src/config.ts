import { hostname } from 'node:os';
import { resolve } from 'node:path';
import { bool, HTTP_URL, int, logLevel, openaiBaseUrl, readConfig, str, url, type Env } from '@cadre/config';

/** The only reader of the environment for the vm-agent; parsed once at start-up and passed in. */
export function vmAgentConfig(env: Env) {
  const config = readConfig(env, {
    gatewayUrl: url('CADRE_GATEWAY_URL', HTTP_URL),
    runsApiKey: str(['RUNS_API_KEY', 'WINDIE_RUNS_API_KEY']),
    workspaceId: str('VM_AGENT_WORKSPACE_ID', 'default'),
    workerId: str('VM_AGENT_WORKER_ID', hostname()),
    vmId: str('VM_AGENT_VM_ID'),
    userId: str('VM_AGENT_USER_ID'),
    /** Unset: a directory of this process's own under the system temp dir (see main.ts). */
    workdir: str('VM_AGENT_WORKDIR'),
    openaiBaseUrl: openaiBaseUrl(),
    openaiApiKey: str('OPENAI_API_KEY'),
    model: str('CADRE_MODEL', 'cadre-scripted'),
    maxTurns: int('CADRE_MAX_TURNS', 8, { min: 1, max: 100 }),
    modelRetries: int('CADRE_MODEL_RETRIES', 3, { min: 0, max: 10 }),
    /** A whole run, paused time included (runAgent's deadline is absolute). */
    runTimeoutMs: int('VM_AGENT_RUN_TIMEOUT_MS', 3_600_000, { min: 1_000 }),
    shellTimeoutMs: int('VM_AGENT_SHELL_TIMEOUT_MS', 10_000, { min: 100, max: 3_600_000 }),
    logLevel: logLevel(),
    shutdownGraceMs: int('VM_AGENT_SHUTDOWN_GRACE_MS', 5_000, { min: 0 }),
    /** `/metrics` of this agent on a port of its own (0 = not served), on loopback unless told otherwise. */
    metricsPort: int('VM_AGENT_METRICS_PORT', 0, { min: 0, max: 65535 }),
    metricsHost: str('VM_AGENT_METRICS_HOST', '127.0.0.1'),
    /** Set by `npm start`: stop when the stack process goes away. */
    exitWithParent: bool('CADRE_EXIT_WITH_PARENT', false),
  });
  return {
    ...config,
    gatewayUrl: (config.gatewayUrl ?? 'http://127.0.0.1:8080').replace(/\/+$/, ''),
    vmId: config.vmId ?? config.workerId,
    workdir: config.workdir === undefined ? undefined : resolve(config.workdir),
  };
}

export type VmAgentConfig = ReturnType<typeof vmAgentConfig>;

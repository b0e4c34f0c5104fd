import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { int, logLevel, oneOf, openaiBaseUrl, readConfig, redisTarget, str, type Env } from '@cadre/config';

/** The repository root: children run with it as cwd, and the default data dir lives in it. */
export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/**
 * The only reader of the environment for `npm start`. The environment is also handed on to the children, each
 * getting only the variables its role reads (child-env.ts), so every gateway/worker/vm-agent variable works here
 * too; the fields below are the ones the stack itself decides on or fills in.
 */
export function stackConfig(env: Env) {
  const config = readConfig(env, {
    port: int('PORT', 8080, { min: 1, max: 65535 }),
    // Dev default: only this machine can reach the stack. The gateway alone defaults to 0.0.0.0.
    host: str('HOST', '127.0.0.1'),
    /** Unset: a private redis-server. Set (REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS): the children use it. */
    redis: redisTarget(),
    openaiBaseUrl: openaiBaseUrl(),
    openaiApiKey: str('OPENAI_API_KEY'),
    apiKey: str('CADRE_API_KEY'),
    workers: int('WORKERS', 1, { min: 1, max: 64 }),
    runsApiKey: str(['RUNS_API_KEY', 'WINDIE_RUNS_API_KEY', 'WINDIE_DEMO_API_KEY']),
    runsControlApiKey: str(['RUNS_CONTROL_API_KEY', 'WINDIE_RUNS_CONTROL_API_KEY']),
    /** vm-agent processes serving workspace `default` (0 turns them off). */
    vmAgents: int('VM_AGENTS', 1, { min: 0, max: 16 }),
    workerConcurrency: int('WORKER_CONCURRENCY', 8, { min: 1, max: 1000 }),
    logLevel: logLevel(),
    /** auto: pretty, coloured logs when stdout is a terminal, JSON lines otherwise; json or pretty force one. */
    logFormat: oneOf('LOG_FORMAT', ['auto', 'json', 'pretty'] as const, 'auto'),
    /** no-color.org: any non-empty value turns colour off. */
    noColour: str('NO_COLOR'),
    dataDir: str('CADRE_DATA_DIR', resolve(REPO_ROOT, '.cadre')),
    readyTimeoutMs: int('CADRE_READY_TIMEOUT_MS', 20_000, { min: 1_000 }),
    stopGraceMs: int('CADRE_STOP_GRACE_MS', 25_000, { min: 0 }),
  });
  return { ...config, dataDir: resolve(config.dataDir), passthroughEnv: { ...env } };
}

export type StackConfig = ReturnType<typeof stackConfig>;

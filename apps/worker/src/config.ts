import { hostname } from 'node:os';
import { bool, eventRetentionSec, int, logLevel, openaiBaseUrl, readConfig, redisTarget, str, type Env } from '@cadre/config';

/** The only reader of the environment for the worker pool; parsed once at start-up. */
export function workerConfig(env: Env) {
  return readConfig(env, {
    redis: redisTarget(),
    openaiBaseUrl: openaiBaseUrl(),
    openaiApiKey: str('OPENAI_API_KEY'),
    model: str('CADRE_MODEL', 'cadre-scripted'),
    concurrency: int('WORKER_CONCURRENCY', 8, { min: 1, max: 1000 }),
    hostId: str('CADRE_HOST_ID', `${hostname()}:${process.pid}`),
    keyPrefix: str('CADRE_KEY_PREFIX', 'cadre'),
    logLevel: logLevel(),
    retentionSec: eventRetentionSec(),
    maxEventsPerTask: int('CADRE_MAX_EVENTS_PER_TASK', 100_000, { min: 100 }),
    maxTurns: int('CADRE_MAX_TURNS', 8, { min: 1, max: 100 }),
    workerTimeoutMs: int('CADRE_WORKER_TIMEOUT_MS', 300_000, { min: 100 }),
    modelRetries: int('CADRE_MODEL_RETRIES', 3, { min: 0, max: 10 }),
    /**
     * A job whose lock is not renewed for this long is handed to another worker (crash recovery). The stall check
     * runs every half of it, so a dead worker's job is retaken within 1.5 × this (15 s by default).
     */
    lockMs: int('CADRE_JOB_LOCK_MS', 10_000, { min: 500 }),
    /** How many times a job may lose its worker before it fails for good. */
    maxAttempts: int('CADRE_MAX_ATTEMPTS', 3, { min: 1, max: 20 }),
    shutdownGraceMs: int('CADRE_SHUTDOWN_GRACE_MS', 20_000, { min: 0 }),
    /**
     * How often each worker looks for turns whose job failed for good with their end unwritten (the turn sweep; also
     * once at start).
     */
    turnSweepIntervalMs: int('CADRE_TURN_SWEEP_INTERVAL_MS', 60_000, { min: 50 }),
    /** Set by `npm start`: stop when the stack process goes away. */
    exitWithParent: bool('CADRE_EXIT_WITH_PARENT', false),
    /** `/metrics` of this worker on a port of its own; 0 = not served. */
    metricsPort: int('WORKER_METRICS_PORT', 0, { min: 0, max: 65535 }),
    /** A client tool's deadline when its ToolSchema sets no timeout_ms. */
    sessionToolTimeoutMs: int('CADRE_SESSION_TOOL_TIMEOUT_MS', 120_000, { min: 100, max: 3_600_000 }),
    /** An open session's keys live this long after its last turn began. */
    sessionIdleTtlSec: int('CADRE_SESSION_IDLE_TTL_SEC', 7 * 24 * 3600, { min: 60 }),
    metricsHost: str('WORKER_METRICS_HOST', '0.0.0.0'),
  });
}

export type WorkerConfig = ReturnType<typeof workerConfig>;

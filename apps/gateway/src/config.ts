import { bool, int, readConfig, str, url, workspaceKeys, type Env } from '@cadre/config';

/** The only reader of the environment for the gateway; parsed once at start-up. */
export function gatewayConfig(env: Env) {
  return readConfig(env, {
    port: int('PORT', 8080, { min: 0, max: 65535 }),
    host: str('HOST', '0.0.0.0'),
    redisUrl: url('REDIS_URL'),
    apiKey: str('CADRE_API_KEY'),
    workspaceKeys: workspaceKeys('CADRE_API_KEYS'),
    devMode: bool('CADRE_DEV_MODE', false),
    keyPrefix: str('CADRE_KEY_PREFIX', 'cadre'),
    logLevel: str('LOG_LEVEL', 'info'),
    retentionSec: int('CADRE_EVENT_RETENTION_SEC', 7 * 24 * 3600, { min: 60 }),
    maxEventsPerTask: int('CADRE_MAX_EVENTS_PER_TASK', 100_000, { min: 100 }),
    defaultMaxWorkers: int('CADRE_MAX_WORKERS', 8, { min: 1, max: 16 }),
    watcherBufferLimit: int('CADRE_WATCHER_BUFFER', 1024, { min: 16 }),
    bodyLimitBytes: int('CADRE_BODY_LIMIT_BYTES', 1024 * 1024, { min: 1024 }),
    shutdownGraceMs: int('CADRE_SHUTDOWN_GRACE_MS', 10_000, { min: 0 }),
  });
}

export type GatewayConfig = ReturnType<typeof gatewayConfig>;

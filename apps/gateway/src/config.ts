import { bool, eventRetentionSec, int, logLevel, openaiBaseUrl, positiveIntOr, readConfig, redisTarget, str, workspaceKeys, type Env } from '@cadre/config';

/** The only reader of the environment for the gateway; parsed once at start-up. */
export function gatewayConfig(env: Env) {
  return readConfig(env, {
    port: int('PORT', 8080, { min: 0, max: 65535 }),
    host: str('HOST', '0.0.0.0'),
    redis: redisTarget(),
    apiKey: str('CADRE_API_KEY'),
    workspaceKeys: workspaceKeys('CADRE_API_KEYS'),
    devMode: bool('CADRE_DEV_MODE', false),
    keyPrefix: str('CADRE_KEY_PREFIX', 'cadre'),
    logLevel: logLevel(),
    retentionSec: eventRetentionSec(),
    maxEventsPerTask: int('CADRE_MAX_EVENTS_PER_TASK', 100_000, { min: 100 }),
    defaultMaxWorkers: int('CADRE_MAX_WORKERS', 8, { min: 1, max: 16 }),
    watcherBufferLimit: int('CADRE_WATCHER_BUFFER', 1024, { min: 16 }),
    bodyLimitBytes: int('CADRE_BODY_LIMIT_BYTES', 1024 * 1024, { min: 1024 }),
    shutdownGraceMs: int('CADRE_SHUTDOWN_GRACE_MS', 10_000, { min: 0 }),
    /**
     * gRPC calls one connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): far above what a
     * UI watching many teams over one channel opens, so only a client that leaks calls meets it. At most 2^32-1.
     */
    grpcMaxConcurrentStreams: int('CADRE_GRPC_MAX_CONCURRENT_STREAMS', 1000, { min: 1, max: 0xffff_ffff }),
    /** A task still not enqueued this long after its creation began was left by a gateway that died: enqueue it. */
    enqueueGraceMs: int('CADRE_ENQUEUE_GRACE_MS', 10_000, { min: 100 }),
    /**
     * How often each gateway looks for unfinished tasks whose BullMQ jobs were lost (to a failover) and re-adds them
     * (the task reconciler; tasks younger than CADRE_ENQUEUE_GRACE_MS are left alone).
     */
    taskReconcileIntervalMs: int('CADRE_TASK_RECONCILE_INTERVAL_MS', 30_000, { min: 50 }),
    /** Set by `npm start`: stop when the stack process goes away. */
    exitWithParent: bool('CADRE_EXIT_WITH_PARENT', false),
    // The original's names keep their meaning: WINDIE_DEMO_API_KEY is its fallback runs key, and its control key
    // guards stop-all.
    runsApiKey: str(['RUNS_API_KEY', 'WINDIE_RUNS_API_KEY', 'WINDIE_DEMO_API_KEY']),
    runsControlApiKey: str(['RUNS_CONTROL_API_KEY', 'WINDIE_RUNS_CONTROL_API_KEY']),
    /** `ws1:key1,ws2:key2`: runs keys bound to one workspace each (the shared key above reaches all). */
    runsWorkspaceKeys: workspaceKeys('RUNS_API_KEYS'),
    // As the original: an invalid or non-positive cap means 1.
    runsMaxActivePerWorkspace: positiveIntOr(['RUNS_MAX_ACTIVE_PER_WORKSPACE', 'WINDIE_VM_MAX_ACTIVE_RUNS_PER_WORKSPACE'], 1),
    runsWorkerTtlMs: int('RUNS_WORKER_TTL_MS', 30_000, { min: 100 }),
    runsMaxAttempts: int('RUNS_MAX_ATTEMPTS', 3, { min: 1, max: 100 }),
    /** The model a session uses when StartSession / POST /api/sessions names none. */
    model: str('CADRE_MODEL', 'cadre-scripted'),
    /** More models sessions may switch to (comma-separated; cadre rpc set_model, /ws update-settings). */
    extraModels: str('CADRE_MODELS', ''),
    /** StreamSession keepalive period during a turn (roz: 15 s). */
    sessionKeepaliveMs: int('CADRE_SESSION_KEEPALIVE_MS', 15_000, { min: 100 }),
    /** An open session's keys live this long after its last turn began. */
    sessionIdleTtlSec: int('CADRE_SESSION_IDLE_TTL_SEC', 7 * 24 * 3600, { min: 60 }),
    runsHeartbeatIntervalMs: int('RUNS_HEARTBEAT_INTERVAL_MS', 5_000, { min: 50 }),
    /** The model server the workers use: kontekst GetStatus reports it and its health. */
    openaiBaseUrl: openaiBaseUrl(),
    /** Shown by kontekst GetStatus (npm start sets it to the stack's data dir). */
    dataDir: str('CADRE_DATA_DIR', ''),
    /** How long a kontekst Run's proposed tool call waits for ApproveTool/DenyTool before it is denied. */
    kontekstApprovalTimeoutSecs: int('CADRE_KONTEKST_APPROVAL_TIMEOUT_SECS', 600, { min: 1, max: 7 * 24 * 3600 }),
  });
}

export type GatewayConfig = ReturnType<typeof gatewayConfig>;

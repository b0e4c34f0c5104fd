// What each child of `npm start` may see of the environment: an allow-list per role, so a variable the operator set
// for something else (a cloud token, another app's key) reaches no child, and each child gets only the secrets its
// own job needs (the VM agent: its runs key and the model key; never Redis, the tasks keys or the control key).

export type ChildRole = 'gateway' | 'worker' | 'vm-agent';

/** What any Node process needs to run, find certificates and proxies, and format text. */
const SYSTEM = [
  'PATH', 'HOME', 'USER', 'LOGNAME', 'SHELL', 'LANG', 'LANGUAGE', 'TZ', 'TMPDIR', 'TERM',
  'NODE_EXTRA_CA_CERTS', 'SSL_CERT_FILE', 'SSL_CERT_DIR',
  'HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'http_proxy', 'https_proxy', 'no_proxy',
];
const COMMON = ['LOG_LEVEL', 'CADRE_EXIT_WITH_PARENT', 'CADRE_KEY_PREFIX'];
/** Families every child reads whole: locale, and OpenTelemetry's standard variables (the SDK reads them itself). */
const COMMON_PREFIXES = ['LC_', 'OTEL_'];

/** Families that belong to one role alone (its own settings, no other role's secrets): passed whole. */
const ROLE_PREFIXES: Record<ChildRole, readonly string[]> = { gateway: [], worker: ['WORKER_'], 'vm-agent': ['VM_AGENT_'] };

/** Where Redis is (libs/config redisTarget): for the roles that talk to Redis, never for a VM agent. */
const REDIS_VARIABLES = [
  'REDIS_URL', 'REDIS_CLUSTER_NODES', 'REDIS_SENTINELS', 'REDIS_SENTINEL_NAME', 'REDIS_USERNAME', 'REDIS_PASSWORD',
  'REDIS_SENTINEL_PASSWORD', 'REDIS_DB', 'REDIS_TLS',
] as const;

/** Every variable each role's config.ts reads (tests/child-env.test.ts checks this against the configs). */
export const CHILD_ENV_ALLOW_LIST: Record<ChildRole, readonly string[]> = {
  gateway: [
    'PORT', 'HOST', ...REDIS_VARIABLES, 'CADRE_API_KEY', 'CADRE_API_KEYS', 'CADRE_DEV_MODE', 'CADRE_EVENT_RETENTION_SEC',
    'CADRE_MAX_EVENTS_PER_TASK', 'CADRE_MAX_WORKERS', 'CADRE_WATCHER_BUFFER', 'CADRE_BODY_LIMIT_BYTES',
    'CADRE_SHUTDOWN_GRACE_MS', 'CADRE_ENQUEUE_GRACE_MS', 'CADRE_TASK_RECONCILE_INTERVAL_MS', 'CADRE_MODEL', 'CADRE_MODELS', 'CADRE_SESSION_KEEPALIVE_MS',
    'OPENAI_BASE_URL', 'CADRE_DATA_DIR', 'CADRE_KONTEKST_APPROVAL_TIMEOUT_SECS',
    'CADRE_SESSION_IDLE_TTL_SEC', 'RUNS_API_KEY', 'RUNS_API_KEYS', 'WINDIE_RUNS_API_KEY', 'WINDIE_DEMO_API_KEY', 'RUNS_CONTROL_API_KEY',
    'WINDIE_RUNS_CONTROL_API_KEY',     'RUNS_MAX_ACTIVE_PER_WORKSPACE', 'WINDIE_VM_MAX_ACTIVE_RUNS_PER_WORKSPACE', 'RUNS_WORKER_TTL_MS', 'RUNS_MAX_ATTEMPTS',
    'RUNS_HEARTBEAT_INTERVAL_MS', 'CADRE_GRPC_MAX_CONCURRENT_STREAMS',
  ],
  worker: [
    ...REDIS_VARIABLES, 'OPENAI_BASE_URL', 'OPENAI_API_KEY', 'CADRE_MODEL', 'WORKER_CONCURRENCY', 'CADRE_HOST_ID',
    'CADRE_EVENT_RETENTION_SEC', 'CADRE_MAX_EVENTS_PER_TASK', 'CADRE_MAX_TURNS', 'CADRE_WORKER_TIMEOUT_MS',
    'CADRE_MODEL_RETRIES', 'CADRE_JOB_LOCK_MS', 'CADRE_MAX_ATTEMPTS', 'CADRE_SHUTDOWN_GRACE_MS', 'WORKER_METRICS_PORT',
    'CADRE_SESSION_TOOL_TIMEOUT_MS', 'CADRE_SESSION_IDLE_TTL_SEC', 'CADRE_TURN_SWEEP_INTERVAL_MS',
  ],
  'vm-agent': [
    'CADRE_GATEWAY_URL', 'RUNS_API_KEY', 'WINDIE_RUNS_API_KEY', 'VM_AGENT_WORKSPACE_ID', 'VM_AGENT_WORKER_ID',
    'VM_AGENT_VM_ID', 'VM_AGENT_USER_ID', 'VM_AGENT_WORKDIR', 'OPENAI_BASE_URL', 'OPENAI_API_KEY', 'CADRE_MODEL',
    'CADRE_MAX_TURNS', 'CADRE_MODEL_RETRIES', 'VM_AGENT_RUN_TIMEOUT_MS', 'VM_AGENT_SHELL_TIMEOUT_MS',
    'VM_AGENT_SHUTDOWN_GRACE_MS',
  ],
};

/**
 * V8 flags each role's node starts with. The gateway's young generation is 8 MB a semi-space, fixed. The cap: left
 * to itself, Node 24 grows it to 64 MB once start-up has allocated a little, and keeps it, and a burst of short-lived
 * garbage (a stalled watcher's burst, bench/memory.bench.ts) then grows the old space too; with the cap its RSS
 * under that burst stays below 256 MB, for more (shorter) scavenges (bench/README.md, "Gateway V8 flags"). The floor:
 * at a steady, moderate request rate (heartbeats at half the gateway's throughput) V8 shrinks the young generation
 * and grows it again, over and over, and the heartbeat tail followed those resizes; fixed at the cap, the p99 fell
 * from 16.9–39.2 to 4.4–11.2 ms in alternating runs (bench/README.md, "Gateway V8 flags: a fixed young generation").
 * No allocation-site pretenuring: with many requests in flight V8 decides that some allocation sites' objects live
 * long and allocates them in the old generation, where nearly all die and wait for a mark-compact; without it, and
 * with the fixed young generation, no open-loop window had a mark-compact (6 of 6, against 6 of 6 with one), p99
 * 3.3–7.2 ms against 6.2–18.0, and the stalled burst's peak fell (bench/README.md, same section).
 * Every way of starting the gateway passes the same: `npm start` and the benches use this, and
 * tests/child-env.test.ts checks `npm run gateway` and deploy/Dockerfile (whose CMD Kubernetes runs).
 */
export const CHILD_NODE_ARGS: Record<ChildRole, readonly string[]> = { gateway: ['--max-semi-space-size=8', '--min-semi-space-size=8', '--no-allocation-site-pretenuring'], worker: [], 'vm-agent': [] };

/** The environment a child of `role` starts with: only allowed names, from `env` (unset values left out). */
export function childEnv(role: ChildRole, env: Record<string, string | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of [...SYSTEM, ...COMMON, ...CHILD_ENV_ALLOW_LIST[role]]) {
    const value = env[name];
    if (value !== undefined) out[name] = value;
  }
  for (const [name, value] of Object.entries(env)) {
    if (value !== undefined && [...COMMON_PREFIXES, ...ROLE_PREFIXES[role]].some((prefix) => name.startsWith(prefix))) out[name] = value;
  }
  return out;
}

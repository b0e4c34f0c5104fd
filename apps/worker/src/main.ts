import { tracing } from './tracing.ts';
import { configOrExit, exitForConfig, listenProblem, REDIS_REQUIRED } from '@cadre/config';
import { onShutdown } from '@cadre/lifecycle';
import { createLogger, exitOnCrash, scrubError } from '@cadre/observability';
import { checkRedisAccess, RedisAccessError } from '@cadre/store';
import { workerConfig } from './config.ts';
import { WorkerProbes } from './probes.ts';
import { startWorkerPool } from './worker-pool.ts';

// Composition root: config → logger → worker pool → drain on a signal.
// Bad configuration (a variable, a port in use) ends the process with one line naming the variable, no stack trace.
const config = configOrExit('worker', () => workerConfig(process.env));
const required = {
  REDIS_URL: [config.redis, REDIS_REQUIRED],
  OPENAI_BASE_URL: [config.openaiBaseUrl, 'the model server, e.g. http://127.0.0.1:8081/v1'],
  OPENAI_API_KEY: [config.openaiApiKey, "the model server's key (any value for one that checks none)"],
} as const;
const missing = Object.entries(required).filter(([, [value]]) => !value);
if (missing.length > 0) exitForConfig('worker', missing.map(([name, [, what]]) => `${name}: required: ${what} (npm start sets it up for you)`));
const logger = createLogger({ name: 'worker', level: config.logLevel });
exitOnCrash(logger);
// /healthz, /readyz and /metrics answer from here on, while Redis is still being reached (/readyz: 503 `starting`).
const probes = await WorkerProbes.start(config).catch((err: unknown) => {
  const problem = listenProblem(err, { port: config.metricsPort, host: config.metricsHost, portVariable: 'WORKER_METRICS_PORT', hostVariable: 'WORKER_METRICS_HOST' });
  if (problem) exitForConfig('worker', [problem]);
  logger.fatal({ err: scrubError(err) }, 'worker could not serve its probes');
  process.exit(1);
});
// A Redis that refuses the password or the database, or whose ACL refuses the store its functions, is a configuration
// problem: one line naming the variable (never the password). One it cannot reach is waited for, and said every ~10 s.
await checkRedisAccess(config.redis!, { onUnreachable: (problem) => logger.warn(problem) }).catch((err: unknown) => {
  if (err instanceof RedisAccessError) exitForConfig('worker', [`${err.variable}: ${err.message}`]);
  throw err;
});
const pool = await startWorkerPool(
  { ...config, redis: config.redis!, openaiBaseUrl: config.openaiBaseUrl!, openaiApiKey: config.openaiApiKey! },
  logger,
  probes,
).catch((err: unknown) => {
  // Not rethrown: Node would print the error object, with whatever arguments a library attached to it.
  logger.fatal({ err: scrubError(err) }, 'worker could not start');
  process.exit(1);
});

onShutdown({
  exitWithParent: config.exitWithParent,
  log: (reason) => logger.info({ reason }, 'worker draining'),
  close: async () => {
    await pool.close();
    logger.info('worker stopped');
    await tracing.shutdown();
  },
});

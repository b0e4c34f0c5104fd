import { tracing } from './tracing.ts';
import { configOrExit, exitForConfig, listenProblem } from '@cadre/config';
import { onShutdown } from '@cadre/lifecycle';
import { createLogger } from '@cadre/observability';
import { workerConfig } from './config.ts';
import { startWorkerPool } from './worker-pool.ts';

// Composition root: config → logger → worker pool → drain on a signal.
// Bad configuration (a variable, a port in use) ends the process with one line naming the variable, no stack trace.
const config = configOrExit('worker', () => workerConfig(process.env));
const required = {
  REDIS_URL: [config.redisUrl, 'the Redis to use, e.g. redis://127.0.0.1:6379'],
  OPENAI_BASE_URL: [config.openaiBaseUrl, 'the model server, e.g. http://127.0.0.1:8081/v1'],
  OPENAI_API_KEY: [config.openaiApiKey, "the model server's key (any value for one that checks none)"],
} as const;
const missing = Object.entries(required).filter(([, [value]]) => !value);
if (missing.length > 0) exitForConfig('worker', missing.map(([name, [, what]]) => `${name}: required: ${what} (npm start sets it up for you)`));
const logger = createLogger({ name: 'worker', level: config.logLevel });
const pool = await startWorkerPool(
  { ...config, redisUrl: config.redisUrl!, openaiBaseUrl: config.openaiBaseUrl!, openaiApiKey: config.openaiApiKey! },
  logger,
).catch((err: unknown) => {
  const problem = listenProblem(err, { port: config.metricsPort, host: config.metricsHost, portVariable: 'WORKER_METRICS_PORT', hostVariable: 'WORKER_METRICS_HOST' });
  if (problem) exitForConfig('worker', [problem]);
  throw err;
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

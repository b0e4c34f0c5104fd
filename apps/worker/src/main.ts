import { tracing } from './tracing.ts';
import { onShutdown } from '@cadre/lifecycle';
import { createLogger } from '@cadre/observability';
import { workerConfig } from './config.ts';
import { startWorkerPool } from './worker-pool.ts';

// Composition root: config → logger → worker pool → drain on a signal.
const config = workerConfig(process.env);
const logger = createLogger({ name: 'worker', level: config.logLevel });
const missing = (['redisUrl', 'openaiBaseUrl', 'openaiApiKey'] as const).filter((k) => !config[k]);
if (missing.length > 0) {
  logger.fatal({ missing }, 'REDIS_URL, OPENAI_BASE_URL and OPENAI_API_KEY are required (npm start sets them up for you)');
  process.exit(1);
}
const pool = await startWorkerPool(
  { ...config, redisUrl: config.redisUrl!, openaiBaseUrl: config.openaiBaseUrl!, openaiApiKey: config.openaiApiKey! },
  logger,
);

onShutdown({
  exitWithParent: config.exitWithParent,
  log: (reason) => logger.info({ reason }, 'worker draining'),
  close: async () => {
    await pool.close();
    logger.info('worker stopped');
    await tracing.shutdown();
  },
});

import { createLogger } from '@cadre/observability';
import { workerConfig } from './config.ts';
import { startWorkerPool } from './worker-pool.ts';

// Composition root: config → logger → worker pool → drain on SIGTERM/SIGINT.
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

let closing = false;
const shutdown = async (signal: string): Promise<void> => {
  if (closing) return;
  closing = true;
  logger.info({ signal }, 'worker draining');
  await pool.close();
  logger.info('worker stopped');
  process.exit(0);
};
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));

import { createLogger } from '@cadre/observability';
import { gatewayConfig } from './config.ts';
import { startGateway } from './gateway.ts';

// Composition root: config → logger → gateway (REST + gRPC on one port) → graceful close on SIGTERM/SIGINT.
const config = gatewayConfig(process.env);
const logger = createLogger({ name: 'gateway', level: config.logLevel });
if (!config.redisUrl) {
  logger.fatal('REDIS_URL is not set (npm start sets one up for you with a private redis-server)');
  process.exit(1);
}
const gateway = await startGateway({ ...config, redisUrl: config.redisUrl }, logger);

let closing = false;
const shutdown = async (signal: string): Promise<void> => {
  if (closing) return;
  closing = true;
  logger.info({ signal }, 'gateway draining');
  await gateway.close();
  logger.info('gateway stopped');
  process.exit(0);
};
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));

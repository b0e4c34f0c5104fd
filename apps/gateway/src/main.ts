import { tracing } from './tracing.ts';
import { onShutdown } from '@cadre/lifecycle';
import { createLogger } from '@cadre/observability';
import { gatewayConfig } from './config.ts';
import { startGateway } from './gateway.ts';

// Composition root: config → logger → gateway (REST + gRPC on one port) → graceful close on a signal.
const config = gatewayConfig(process.env);
const logger = createLogger({ name: 'gateway', level: config.logLevel });
if (!config.redisUrl) {
  logger.fatal('REDIS_URL is not set (npm start sets one up for you with a private redis-server)');
  process.exit(1);
}
const gateway = await startGateway({ ...config, redisUrl: config.redisUrl }, logger);

onShutdown({
  exitWithParent: config.exitWithParent,
  log: (reason) => logger.info({ reason }, 'gateway draining'),
  close: async () => {
    await gateway.close();
    logger.info('gateway stopped');
    await tracing.shutdown();
  },
});

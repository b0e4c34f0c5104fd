import { tracing } from './tracing.ts';
import { configOrExit, exitForConfig, listenProblem } from '@cadre/config';
import { onShutdown } from '@cadre/lifecycle';
import { createLogger } from '@cadre/observability';
import { gatewayConfig } from './config.ts';
import { startGateway } from './gateway.ts';

// Composition root: config → logger → gateway (REST + gRPC on one port) → graceful close on a signal.
// Bad configuration (a variable, a port in use) ends the process with one line naming the variable, no stack trace.
const config = configOrExit('gateway', () => gatewayConfig(process.env));
if (!config.redisUrl) exitForConfig('gateway', ['REDIS_URL: required: the Redis to use, e.g. redis://127.0.0.1:6379 (npm start sets up a private redis-server)']);
const logger = createLogger({ name: 'gateway', level: config.logLevel });
const gateway = await startGateway({ ...config, redisUrl: config.redisUrl }, logger).catch((err: unknown) => {
  const problem = listenProblem(err, { port: config.port, host: config.host });
  if (problem) exitForConfig('gateway', [problem]);
  throw err;
});

onShutdown({
  exitWithParent: config.exitWithParent,
  log: (reason) => logger.info({ reason }, 'gateway draining'),
  close: async () => {
    await gateway.close();
    logger.info('gateway stopped');
    await tracing.shutdown();
  },
});

import { tracing } from './tracing.ts';
import { configOrExit, exitForConfig, listenProblem, REDIS_REQUIRED } from '@cadre/config';
import { onShutdown } from '@cadre/lifecycle';
import { createLogger, exitOnCrash, scrubError } from '@cadre/observability';
import { checkRedisAccess, RedisAccessError } from '@cadre/store';
import { gatewayConfig } from './config.ts';
import { startGateway } from './gateway.ts';

// Composition root: config → logger → gateway (REST + gRPC on one port) → graceful close on a signal.
// Bad configuration (a variable, a port in use) ends the process with one line naming the variable, no stack trace.
const config = configOrExit('gateway', () => gatewayConfig(process.env));
if (!config.redis) exitForConfig('gateway', [`REDIS_URL: required: ${REDIS_REQUIRED} (npm start sets up a private redis-server)`]);
const redis = config.redis;
const logger = createLogger({ name: 'gateway', level: config.logLevel });
exitOnCrash(logger);
// A Redis that refuses the password or the database, or whose ACL refuses the store its functions, is a configuration
// problem: one line naming the variable (never the password). One it cannot reach is waited for, and said every ~10 s.
await checkRedisAccess(redis, { onUnreachable: (problem) => logger.warn(problem) }).catch((err: unknown) => {
  if (err instanceof RedisAccessError) exitForConfig('gateway', [`${err.variable}: ${err.message}`]);
  throw err;
});
// kontekst's DaemonService Shutdown drains the process as SIGTERM does (onShutdown below), then it exits.
const gateway = await startGateway({ ...config, redis }, logger, { requestShutdown: () => process.kill(process.pid, 'SIGTERM') }).catch((err: unknown) => {
  const problem = listenProblem(err, { port: config.port, host: config.host });
  if (problem) exitForConfig('gateway', [problem]);
  // Not rethrown: Node would print the error object, with whatever arguments a library attached to it.
  logger.fatal({ err: scrubError(err) }, 'gateway could not start');
  process.exit(1);
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

export { createLogger, type Logger } from './logger.ts';
export { createMetricsRegistry, type MetricsRegistry } from './metrics.ts';

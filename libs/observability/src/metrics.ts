import { Registry, collectDefaultMetrics } from 'prom-client';

export type MetricsRegistry = Registry;

/** A registry per process (not the global one), so tests can run several apps in one process. */
export function createMetricsRegistry(app: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ app });
  collectDefaultMetrics({ register: registry });
  return registry;
}

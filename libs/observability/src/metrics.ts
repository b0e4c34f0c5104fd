import { Counter, Registry, collectDefaultMetrics } from 'prom-client';
import { droppedLogLines } from './log-destination.ts';

export type MetricsRegistry = Registry;

/** A registry per process (not the global one), so tests can run several apps in one process. */
export function createMetricsRegistry(app: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ app });
  collectDefaultMetrics({ register: registry });
  let reported = 0;
  new Counter({
    name: 'cadre_log_lines_dropped_total',
    help: 'Log lines dropped because standard output was not keeping up (or was gone)',
    registers: [registry],
    collect() {
      const dropped = droppedLogLines();
      this.inc(dropped - reported);
      reported = dropped;
    },
  });
  return registry;
}

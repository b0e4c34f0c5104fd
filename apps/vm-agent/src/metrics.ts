import { Counter, Gauge, Histogram } from 'prom-client';
import { agentMetrics, createMetricsRegistry } from '@cadre/observability';

/** The vm-agent's metrics: its calls to the runs API (heartbeats among them), its runs, its agent loop. */
export function vmAgentMetrics(opts: { busy: () => boolean }) {
  const registry = createMetricsRegistry('vm-agent');
  const calls = new Counter({ name: 'cadre_vm_gateway_requests_total', help: 'Calls to the runs API by operation (heartbeat, dispatch, relay) and outcome (ok, fenced, unavailable, rejected)', labelNames: ['operation', 'outcome'], registers: [registry] });
  const seconds = new Histogram({ name: 'cadre_vm_gateway_request_duration_seconds', help: 'Runs API call duration by operation', labelNames: ['operation'], buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 10], registers: [registry] });
  const runs = new Counter({ name: 'cadre_vm_runs_total', help: 'Runs that left this agent: completed, failed, or left without a final event (stopped, fenced, handed back)', labelNames: ['outcome'], registers: [registry] });
  new Gauge({ name: 'cadre_vm_runs_active', help: 'Runs this agent is executing (0 or 1)', registers: [registry], collect() { this.set(opts.busy() ? 1 : 0); } });
  return {
    registry,
    observer: agentMetrics(registry),
    onCall(call: { operation: string; outcome: string; seconds: number }): void {
      calls.inc({ operation: call.operation, outcome: call.outcome });
      seconds.observe({ operation: call.operation }, call.seconds);
    },
    onRunEnded(outcome: string): void {
      runs.inc({ outcome });
    },
  };
}

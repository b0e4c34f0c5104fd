import type http from 'node:http';
import { createMetricsRegistry, serveMetrics, type MetricsRegistry, type Readiness } from '@cadre/observability';

/**
 * The worker's `/metrics`, `/healthz` and `/readyz` on WORKER_METRICS_PORT (0: none served), up before Redis is
 * reached so a probe gets an answer while the worker connects: `/readyz` says 503 `starting` until the pool
 * `attach`es its own check.
 */
export class WorkerProbes {
  readonly registry: MetricsRegistry = createMetricsRegistry('worker');
  private readiness: () => Promise<Readiness> = async () => ({ ready: false, reason: 'starting' });
  private server: http.Server | undefined;

  static async start(config: { metricsPort: number; metricsHost: string }): Promise<WorkerProbes> {
    const probes = new WorkerProbes();
    if (config.metricsPort > 0) {
      probes.server = await serveMetrics({ port: config.metricsPort, host: config.metricsHost, registry: probes.registry, readiness: () => probes.readiness() });
    }
    return probes;
  }

  /** The bound port (the OS's pick when configured 0 in tests), or undefined when none is served. */
  get port(): number | undefined {
    return this.server ? (this.server.address() as { port: number }).port : undefined;
  }

  /** From now on `/readyz` answers what `readiness` says. */
  attach(readiness: () => Promise<Readiness>): void {
    this.readiness = readiness;
  }

  close(): void {
    this.server?.close();
  }
}

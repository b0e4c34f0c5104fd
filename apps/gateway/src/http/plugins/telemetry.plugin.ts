import type { FastifyInstance } from 'fastify';
import { Counter, Histogram, type Registry } from 'prom-client';
import { nameHttpSpan } from '@cadre/observability';

/** Request buckets (seconds): a heartbeat or task read is milliseconds; an SSE stream lasts as long as it is watched. */
const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 30, 300];

/**
 * Request rate, errors and duration per route template (never the raw URL: ids would make labels unbounded), and
 * the route's name and ids on the request's trace span. Hooks on the root instance, so they cover every route.
 */
export function instrumentHttp(app: FastifyInstance, metrics: Registry): void {
  const requests = new Counter({
    name: 'cadre_http_requests_total', help: 'HTTP requests answered, by route template and status code',
    labelNames: ['method', 'route', 'status_code'], registers: [metrics],
  });
  const seconds = new Histogram({
    name: 'cadre_http_request_duration_seconds', help: 'HTTP request duration by route template (an SSE stream counts until it closes)',
    labelNames: ['method', 'route'], buckets: BUCKETS, registers: [metrics],
  });
  const started = new WeakMap<object, number>();

  app.addHook('onRequest', async (request) => {
    started.set(request, performance.now());
    const params = (request.params ?? {}) as Record<string, unknown>;
    nameHttpSpan(request.method, request.routeOptions.url ?? 'unmatched', {
      ...(typeof params.task_id === 'string' && { task_id: params.task_id }),
      ...(typeof params.run_id === 'string' && { run_id: params.run_id }),
    });
  });
  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched';
    requests.inc({ method: request.method, route, status_code: String(reply.statusCode) });
    const t0 = started.get(request);
    if (t0 !== undefined) seconds.observe({ method: request.method, route }, (performance.now() - t0) / 1000);
  });
}

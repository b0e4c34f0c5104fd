import type { FastifyInstance } from 'fastify';
import { Counter, Histogram, type Registry } from 'prom-client';
import { nameHttpSpan, tracingEnabled } from '@cadre/observability';

/** Request buckets (seconds): a heartbeat or task read is milliseconds; an SSE stream lasts as long as it is watched. */
const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 30, 300];

type RouteLabels = { method: string; route: string };
type StatusLabels = RouteLabels & { status_code: string };

/**
 * One route's label objects, made on its first request: a heartbeat or a poll would otherwise build two objects and
 * a status string per request (prom-client keeps the ones it is given, never changes them).
 */
class RouteMetrics {
  readonly labels: RouteLabels;
  private readonly byStatus = new Map<number, StatusLabels>();

  constructor(method: string, route: string) {
    this.labels = { method, route };
  }

  withStatus(statusCode: number): StatusLabels {
    let labels = this.byStatus.get(statusCode);
    if (!labels) {
      labels = { ...this.labels, status_code: String(statusCode) };
      this.byStatus.set(statusCode, labels);
    }
    return labels;
  }
}

declare module 'fastify' {
  interface FastifyRequest {
    /** When the request reached the first hook (performance.now()), and its route's labels: telemetry.plugin.ts. */
    httpStartedAt: number;
    httpRouteMetrics: RouteMetrics | null;
  }
}

/**
 * Request rate, errors and duration per route template (never the raw URL: ids would make labels unbounded), and
 * the route's name and ids on the request's trace span. Hooks on the root instance, so they cover every route.
 * The hooks take `done` rather than returning a promise, and keep what they need on the request: they run on
 * every request.
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
  // method → route template → its labels; the templates are the app's routes and 'unmatched', so this is bounded.
  const routes = new Map<string, Map<string, RouteMetrics>>();
  const routeMetrics = (method: string, route: string): RouteMetrics => {
    let byRoute = routes.get(method);
    if (!byRoute) routes.set(method, (byRoute = new Map()));
    let found = byRoute.get(route);
    if (!found) byRoute.set(route, (found = new RouteMetrics(method, route)));
    return found;
  };

  app.decorateRequest('httpStartedAt', 0);
  app.decorateRequest('httpRouteMetrics', null);
  app.addHook('onRequest', (request, _reply, done) => {
    request.httpStartedAt = performance.now();
    const route = request.routeOptions.url ?? 'unmatched';
    request.httpRouteMetrics = routeMetrics(request.method, route);
    if (tracingEnabled()) {
      const params = (request.params ?? {}) as Record<string, unknown>;
      nameHttpSpan(request.method, route, {
        ...(typeof params.task_id === 'string' && { task_id: params.task_id }),
        ...(typeof params.run_id === 'string' && { run_id: params.run_id }),
      });
    }
    done();
  });
  app.addHook('onResponse', (request, reply, done) => {
    const route = request.httpRouteMetrics ?? routeMetrics(request.method, request.routeOptions.url ?? 'unmatched');
    requests.inc(route.withStatus(reply.statusCode));
    if (request.httpRouteMetrics) seconds.observe(route.labels, (performance.now() - request.httpStartedAt) / 1000);
    done();
  });
}

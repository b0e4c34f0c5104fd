import type { HttpAppDeps } from '../app.ts';
import type { RoutesPlugin } from '../routes-plugin.ts';

const statusResponse = {
  type: 'object',
  additionalProperties: false,
  required: ['status'],
  properties: { status: { type: 'string', enum: ['ok', 'ready', 'not_ready'] } },
} as const;

/** Liveness (the process answers), readiness (Redis answers and we are not draining), Prometheus metrics. */
export const healthRoutes: RoutesPlugin<HttpAppDeps> = async (app, deps) => {
  app.get('/healthz', { schema: { response: { 200: statusResponse } } }, async () => ({ status: 'ok' as const }));
  app.get('/readyz', { schema: { response: { 200: statusResponse, 503: statusResponse } } }, async (_request, reply) => {
    const ready = await deps.isReady().catch(() => false);
    return reply.status(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not_ready' });
  });
  app.get('/metrics', { schema: { response: { 200: { type: 'string' } } } }, async (_request, reply) => {
    reply.header('content-type', deps.metrics.contentType);
    return deps.metrics.metrics();
  });
};

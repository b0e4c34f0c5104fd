import type { HttpAppDeps } from '../app.ts';
import type { RoutesPlugin } from '../routes-plugin.ts';

/** Liveness (the process answers), readiness (Redis answers and we are not draining), Prometheus metrics. */
export const healthRoutes: RoutesPlugin<HttpAppDeps> = async (app, deps) => {
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_request, reply) => {
    const ready = await deps.isReady().catch(() => false);
    return reply.status(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not_ready' });
  });
  app.get('/metrics', async (_request, reply) => {
    reply.header('content-type', deps.metrics.contentType);
    return deps.metrics.metrics();
  });
};

import type { FastifyInstance } from 'fastify';
import type { AuthRefusalLog } from '../../auth-refusals.ts';

/**
 * Every 401 and 403 the HTTP API answers (tasks, sessions, approvals, the runs API with stop-all, the queue admin)
 * goes to the refusal log. One hook on the root instance, so it covers every route, whichever layer refused.
 */
export function logAuthRefusals(app: FastifyInstance, refusals: AuthRefusalLog): void {
  app.addHook('onResponse', (request, reply, done) => {
    const status = reply.statusCode;
    if (status === 401 || status === 403) {
      refusals.record({
        edge: 'http', route: request.routeOptions.url ?? 'unmatched', status: String(status), forbidden: status === 403,
        client: request.ip, credentials: (header) => request.headers[header],
      });
    }
    done();
  });
}

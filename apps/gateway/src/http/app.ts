import http from 'node:http';
import { Ajv } from 'ajv';
import fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyError } from 'fastify';
import { traceHttpRequests, type Logger } from '@cadre/observability';
import type { Registry } from 'prom-client';
import type { Authenticator } from '../auth.ts';
import { httpStatusOf, toApiError } from '../errors.ts';
import type { TaskService } from '../tasks/task-service.ts';
import { healthRoutes } from './routes/health.routes.ts';
import { taskRoutes } from './routes/tasks.routes.ts';
import { runRoutes, type RunRoutesDeps } from './routes/runs.routes.ts';
import { boardPlugin } from './plugins/board.plugin.ts';
import { sessionRoutes, type SessionRoutesDeps } from './routes/sessions.routes.ts';
import { queueAdminPlugin } from './plugins/queue-admin.plugin.ts';
import type { Queue } from 'bullmq';
import type { SseSessions } from './sse.ts';
import { instrumentHttp } from './plugins/telemetry.plugin.ts';

export interface HttpAppDeps extends RunRoutesDeps, SessionRoutesDeps {
  logger: Logger;
  auth: Authenticator;
  tasks: TaskService;
  sse: SseSessions;
  metrics: Registry;
  isReady: () => Promise<boolean>;
  bodyLimitBytes: number;
  /** BullMQ queues shown by bull-board at /admin/queues. */
  adminQueues: Queue[];
}

// Bodies are validated strictly (no coercion, unknown fields rejected); querystrings and params arrive as text,
// so they are coerced ("after_seq=5" → 5) by a second Ajv.
const strictAjv = new Ajv({ allErrors: false, coerceTypes: false, removeAdditional: false, useDefaults: true });
const coercingAjv = new Ajv({ allErrors: false, coerceTypes: true, removeAdditional: false, useDefaults: true });

const CLIENT_ERROR_CODES: Record<number, string> = {
  400: 'invalid_argument',
  404: 'not_found',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
};

/** The first schema error as one sentence that names the offending field, unknown fields included. */
function validationMessage(context: string, errors: NonNullable<FastifyError['validation']>, fallback: string): string {
  const first = errors[0];
  if (!first) return `${context}${fallback.replace(/^(body|querystring|params|headers)/, '')}`;
  const where = `${context}${first.instancePath}`;
  const unknown = first.keyword === 'additionalProperties' ? (first.params as { additionalProperty?: unknown }).additionalProperty : undefined;
  if (typeof unknown === 'string') return `${where} has an unknown field "${unknown.slice(0, 64)}"`;
  return `${where} ${first.message ?? 'is invalid'}`;
}

/**
 * The HTTP surface as a Fastify instance that does not listen: main.ts hands it connections from the shared
 * port, tests use inject() or a real port.
 */
export function buildHttpApp(deps: HttpAppDeps): FastifyInstance {
  const app = fastify({
    loggerInstance: deps.logger.child({ component: 'http' }) as FastifyBaseLogger,
    bodyLimit: deps.bodyLimitBytes,
    serverFactory: (handler) => http.createServer(traceHttpRequests(handler)),
    return503OnClosing: true,
  });
  app.setValidatorCompiler(({ schema, httpPart }) =>
    (httpPart === 'body' ? strictAjv : coercingAjv).compile(schema as object) as (data: unknown) => boolean,
  );

  app.setErrorHandler((err: FastifyError, request, reply) => {
    const api = toApiError(err);
    if (api) return reply.status(httpStatusOf(api.code)).send({ error: { code: api.code, message: api.message } });
    if (err.validation) {
      return reply.status(400).send({ error: { code: 'invalid_argument', message: validationMessage(err.validationContext ?? 'request', err.validation, err.message) } });
    }
    const status = err.statusCode ?? 500;
    // Fastify's own client errors (bad JSON, wrong content type, body too large) answer with the API's codes,
    // not Fastify's internal FST_ERR_* names.
    if (status < 500) {
      const message = status === 415 ? `unsupported content-type "${String(request.headers['content-type'] ?? '').slice(0, 100)}"; send application/json` : err.message;
      return reply.status(status).send({ error: { code: CLIENT_ERROR_CODES[status] ?? 'bad_request', message } });
    }
    request.log.error({ err, url: request.routeOptions.url }, 'request failed');
    return reply.status(500).send({ error: { code: 'internal', message: 'internal error' } });
  });
  app.setNotFoundHandler((request, reply) =>
    reply.status(404).send({ error: { code: 'not_found', message: `no route for ${request.method} ${request.url.split('?')[0]}` } }),
  );

  instrumentHttp(app, deps.metrics);
  // Per-request logs only at warn and above: polling, SSE reconnects and heartbeats would drown the rest.
  app.register(healthRoutes, { ...deps, logLevel: 'warn' });
  app.register(taskRoutes, { ...deps, logLevel: 'warn' });
  app.register(runRoutes, { ...deps, logLevel: 'warn' });
  app.register(boardPlugin, { logLevel: 'warn' });
  app.register(sessionRoutes, { ...deps, logLevel: 'warn' });
  app.register(queueAdminPlugin, { ...deps, logLevel: 'warn' });
  return app;
}

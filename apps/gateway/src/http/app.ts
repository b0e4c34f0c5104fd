import http from 'node:http';
import { Ajv } from 'ajv';
import fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyError, type FastifyReply } from 'fastify';
import { traceHttpRequests, type Logger } from '@cadre/observability';
import type { Registry } from 'prom-client';
import type { Authenticator } from '../auth.ts';
import { errorHandler } from './error-handler.ts';
import type { TaskService } from '../tasks/task-service.ts';
import { healthRoutes } from './routes/health.routes.ts';
import { taskRoutes } from './routes/tasks.routes.ts';
import { approvalRoutes } from './routes/approvals.routes.ts';
import type { ApprovalService } from '../approvals/approval-service.ts';
import { runRoutes, type RunRoutesDeps } from './routes/runs.routes.ts';
import { boardPlugin } from './plugins/board.plugin.ts';
import { sessionRoutes, type SessionRoutesDeps } from './routes/sessions.routes.ts';
import { queueAdminPlugin } from './plugins/queue-admin.plugin.ts';
import type { Queue } from 'bullmq';
import { findBoundsViolation, withFiniteNumbers, withSafeIntegers, type BoundsViolation } from './request-bounds.ts';
import type { SseSessions } from './sse.ts';
import { instrumentHttp } from './plugins/telemetry.plugin.ts';
import { windiePlugin, type SocketCounter } from '../ws/windie.plugin.ts';
import { checkResponsesAgainstHandlers } from './response-check.ts';
import { lazyRequestLogger } from './request-logger.ts';
import type { AuthRefusalLog } from '../auth-refusals.ts';
import { logAuthRefusals } from './plugins/auth-refusals.plugin.ts';

export interface HttpAppDeps extends RunRoutesDeps, SessionRoutesDeps {
  logger: Logger;
  auth: Authenticator;
  /** Where every 401/403 (and refused /ws handshake) is logged and counted. */
  authRefusals: AuthRefusalLog;
  tasks: TaskService;
  approvals: ApprovalService;
  sse: SseSessions;
  metrics: Registry;
  isReady: () => Promise<boolean>;
  bodyLimitBytes: number;
  /** Models a /ws client may choose (the first is the default). */
  models: string[];
  /** BullMQ queues shown by bull-board at /admin/queues. */
  adminQueues: Queue[];
  /** Tests: a JSON answer that differs from its handler's object (a response schema dropped a field) is a 500. */
  checkResponses?: boolean;
  /** Counts open /ws sockets. */
  wsSockets?: SocketCounter;
}

// Bodies are validated strictly (no coercion, unknown fields rejected); querystrings and params arrive as text,
// so they are coerced ("after_seq=5" → 5) by a second Ajv.
const strictAjv = new Ajv({ allErrors: false, coerceTypes: false, removeAdditional: false, useDefaults: true });
const coercingAjv = new Ajv({ allErrors: false, coerceTypes: true, removeAdditional: false, useDefaults: true });

/** A broken bound as Fastify's own schema errors look, so each API's error handler answers it in its shape. */
function boundsError(part: 'params' | 'querystring' | 'body', violation: BoundsViolation): FastifyError {
  const err = new Error(`${part}${violation.instancePath} ${violation.message}`) as FastifyError;
  err.statusCode = 400;
  err.validationContext = part;
  err.validation = [{ keyword: 'bounds', instancePath: violation.instancePath, schemaPath: '', params: {}, message: violation.message }];
  return err;
}

function boundsViolation(value: unknown, part: 'params' | 'querystring' | 'body'): FastifyError | undefined {
  const violation = findBoundsViolation(value);
  return violation && boundsError(part, violation);
}

/**
 * The HTTP surface as a Fastify instance that does not listen: main.ts hands it connections from the shared
 * port, tests use inject() or a real port.
 */
export function buildHttpApp(deps: HttpAppDeps): FastifyInstance {
  const app = fastify({
    loggerInstance: deps.logger.child({ component: 'http' }) as FastifyBaseLogger,
    childLoggerFactory: lazyRequestLogger,
    bodyLimit: deps.bodyLimitBytes,
    serverFactory: (handler) => http.createServer(traceHttpRequests(handler)),
    return503OnClosing: true,
    // A request Node's HTTP parser refuses (a URL or headers over its size limit, broken framing) never reaches
    // Fastify: answer it in JSON too, in both APIs' shapes (the path is not known here), then close.
    clientErrorHandler: (err: Error & { code?: string }, socket) => {
      if (err.code === 'ECONNRESET' || !socket.writable) return void socket.destroy();
      const [status, reason] = err.code === 'HPE_HEADER_OVERFLOW' ? [431, 'Request Header Fields Too Large'] : [400, 'Bad Request'];
      const message = status === 431 ? 'the request line or headers are too large' : `the request is not valid HTTP (${err.code ?? 'parse error'})`;
      const body = JSON.stringify({ detail: message, error: { code: status === 431 ? 'payload_too_large' : 'bad_request', message } });
      socket.end(`HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
    },
    // A path Fastify cannot route (e.g. `%80`, not UTF-8 once decoded) is refused before any route, in the shape of
    // the API it was meant for.
    frameworkErrors: (err, request, reply) => {
      const message = `the path is not valid percent-encoded UTF-8 (${err.code})`;
      const error = { code: 'invalid_argument', message };
      void (reply as FastifyReply).status(400).send(request.url.startsWith('/api/runs') ? { detail: message, error } : { error });
    },
  });
  // Every route reads JSON: Fastify's default text/plain parser would hand a schema a string ("body must be object");
  // without it, text/plain is a 415 asking for JSON, as every other type is (error-handler.ts words it).
  app.removeContentTypeParser('text/plain');
  app.setValidatorCompiler(({ schema, httpPart }) =>
    withFiniteNumbers((httpPart === 'body' ? strictAjv : coercingAjv).compile(withSafeIntegers(schema) as object)),
  );
  // Before any schema or handler of any route (and after auth): the bounds every part of every request must meet.
  // Three calls, not a loop over [part, value] pairs: every request would allocate the pairs.
  app.addHook('preValidation', (request, _reply, done) => {
    const violation = boundsViolation(request.params, 'params') ?? boundsViolation(request.query, 'querystring') ?? boundsViolation(request.body, 'body');
    done(violation);
  });

  app.setErrorHandler(errorHandler('cadre'));
  if (deps.checkResponses) checkResponsesAgainstHandlers(app);
  app.setNotFoundHandler((request, reply) =>
    reply.status(404).send({ error: { code: 'not_found', message: `no route for ${request.method} ${request.url.split('?')[0]}` } }),
  );

  instrumentHttp(app, deps.metrics);
  logAuthRefusals(app, deps.authRefusals);
  // Per-request logs only at warn and above: polling, SSE reconnects and heartbeats would drown the rest; a refused
  // credential is logged by logAuthRefusals, rate-limited.
  app.register(healthRoutes, { ...deps, logLevel: 'warn' });
  app.register(taskRoutes, { ...deps, logLevel: 'warn' });
  app.register(approvalRoutes, { ...deps, logLevel: 'warn' });
  app.register(runRoutes, { ...deps, logLevel: 'warn' });
  app.register(boardPlugin, { logLevel: 'warn' });
  app.register(sessionRoutes, { ...deps, logLevel: 'warn' });
  app.register(queueAdminPlugin, { ...deps, logLevel: 'warn' });
  app.register(windiePlugin, {
    sessions: deps.sessions, auth: deps.auth, refusals: deps.authRefusals, logger: deps.logger, models: deps.models, defaultWorkspace: 'windie', logLevel: 'warn',
    ...(deps.wsSockets && { sockets: deps.wsSockets }),
  });
  return app;
}

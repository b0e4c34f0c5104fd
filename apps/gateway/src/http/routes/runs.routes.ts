import type { FastifyError, FastifyPluginAsync } from 'fastify';
import { httpStatusOf, toApiError } from '../../errors.ts';
import { ApiError } from '../../errors.ts';
import type { RunService } from '../../runs/run-service.ts';
import type { RunsAuthenticator } from '../../runs/runs-auth.ts';
import { resumeCursor, type SseSessions } from '../sse.ts';
import {
  controlBody,
  createRunBody,
  dispatchedBody,
  eventsQuery,
  heartbeatBody,
  listRunsQuery,
  relayBody,
  runParams,
  stopAllBody,
  type ControlBody,
  type CreateRunBody,
  type DispatchedBody,
  type HeartbeatBody,
  type RelayBody,
} from '../schemas/runs.schema.ts';

export interface RunRoutesDeps {
  runs: RunService;
  runsAuth: RunsAuthenticator;
  sse: SseSessions;
}

interface RunParams {
  run_id: string;
}

/**
 * The WindieOS "Runs / VM Control" API, on the wire as the original: same paths, fields and header. Errors carry
 * FastAPI's `detail` (what clients of the original read) next to Cadre's `error`; invalid bodies are 422 as there.
 */
export const runRoutes: FastifyPluginAsync<RunRoutesDeps> = async (app, deps) => {
  app.addHook('onRequest', async (request) => deps.runsAuth.check(request.headers['x-windie-runs-key']));
  app.setErrorHandler((err: FastifyError, request, reply) => {
    const api = toApiError(err);
    if (api) return reply.status(httpStatusOf(api.code)).send({ detail: api.message, error: { code: api.code, message: api.message } });
    if (err.validation) {
      const first = err.validation[0];
      const where = `${err.validationContext ?? 'request'}${first?.instancePath ?? ''}`;
      const message = first?.keyword === 'additionalProperties'
        ? `${where} has an unknown field "${String((first.params as { additionalProperty?: unknown }).additionalProperty).slice(0, 64)}"`
        : `${where} ${first?.message ?? 'is invalid'}`;
      const status = err.validationContext === 'body' ? 422 : 400;
      return reply.status(status).send({ detail: message, error: { code: 'invalid_argument', message } });
    }
    const status = err.statusCode ?? 500;
    if (status < 500) return reply.status(status).send({ detail: err.message, error: { code: 'bad_request', message: err.message } });
    request.log.error({ err, url: request.routeOptions.url }, 'runs request failed');
    return reply.status(500).send({ detail: 'internal error', error: { code: 'internal', message: 'internal error' } });
  });

  const create = async (request: { body: CreateRunBody; headers: Record<string, string | string[] | undefined> }) => {
    const key = request.headers['idempotency-key'];
    const idem = Array.isArray(key) ? key[0] : key;
    if (idem !== undefined && (idem.length === 0 || idem.length > 255)) throw new ApiError('invalid_argument', 'Idempotency-Key must be 1 to 255 characters');
    const { run, events } = await deps.runs.create(request.body, idem);
    return { run, events };
  };
  app.post<{ Body: CreateRunBody }>('/api/runs/', { schema: { body: createRunBody } }, create);
  app.post<{ Body: CreateRunBody }>('/api/runs', { schema: { body: createRunBody } }, create);

  app.get<{ Querystring: { workspace_id: string; status?: CreateRunBody['workspace_id'] } }>('/api/runs', { schema: { querystring: listRunsQuery } }, async (request) => ({
    runs: await deps.runs.list(request.query.workspace_id, request.query.status as never),
  }));

  app.post<{ Body: HeartbeatBody }>('/api/runs/workers/heartbeat', { schema: { body: heartbeatBody } }, async (request) => deps.runs.heartbeat(request.body));

  app.post<{ Body: { workspace_id?: string; requested_by?: string } | null }>('/api/runs/stop-all', { schema: { body: stopAllBody } }, async (request) => {
    deps.runsAuth.checkControl(request.headers['x-windie-runs-control-key']);
    return deps.runs.stopAll(request.body?.workspace_id, request.body?.requested_by ?? '');
  });

  app.get<{ Params: RunParams }>('/api/runs/:run_id', { schema: { params: runParams } }, async (request) => ({ run: await deps.runs.get(request.params.run_id) }));

  app.get<{ Params: RunParams; Querystring: { after_seq?: number; limit?: number } }>(
    '/api/runs/:run_id/events',
    { schema: { params: runParams, querystring: eventsQuery } },
    async (request) => deps.runs.events(request.params.run_id, request.query.after_seq ?? 0, request.query.limit ?? 200),
  );

  app.get<{ Params: RunParams; Querystring: { after_seq?: number } }>(
    '/api/runs/:run_id/stream',
    { schema: { params: runParams, querystring: { type: 'object', properties: { after_seq: { type: 'integer', minimum: 0 } } } } },
    async (request, reply) => {
      const afterSeq = resumeCursor(request, request.query.after_seq);
      deps.sse.serve(request, reply, await deps.runs.watch(request.params.run_id, afterSeq));
    },
  );

  app.post<{ Params: RunParams; Body: ControlBody }>('/api/runs/:run_id/control', { schema: { params: runParams, body: controlBody } }, async (request) => ({
    run: await deps.runs.control(request.params.run_id, request.body.action, request.body.control_mode, request.body.requested_by ?? ''),
  }));

  app.post<{ Params: RunParams; Body: DispatchedBody }>('/api/runs/:run_id/worker-dispatched', { schema: { params: runParams, body: dispatchedBody } }, async (request) => ({
    run: await deps.runs.dispatched(request.params.run_id, request.body),
  }));

  app.post<{ Params: RunParams; Body: RelayBody }>('/api/runs/:run_id/events', { schema: { params: runParams, body: relayBody } }, async (request) =>
    deps.runs.relay(request.params.run_id, request.body),
  );
};

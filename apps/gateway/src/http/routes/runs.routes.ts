import { canAccess, type Principal } from '../../auth.ts';
import { ApiError } from '../../errors.ts';
import { errorHandler, idempotencyKeyOf } from '../error-handler.ts';
import type { RunService } from '../../runs/run-service.ts';
import type { RunApprovals } from '../../runs/run-approvals.ts';
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
  proposeBody,
  runApprovalParams,
  runParams,
  stopAllBody,
  createRunResponse,
  heartbeatResponse,
  proposeResponse,
  relayResponse,
  runEventsResponse,
  runListResponse,
  runSchema,
  runWithEventResponse,
  stopAllResponse,
} from '../schemas/runs.schema.ts';
import { approvalResponse } from '../schemas/approvals.schema.ts';
import { withErrorResponses } from '../schemas/errors.schema.ts';
import type { CreateRunBody } from '@cadre/protocol';
import type { RoutesPlugin } from '../routes-plugin.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** What the request's runs key (or, on stop-all, control key) reaches. */
    runsPrincipal: Principal;
  }
}

export interface RunRoutesDeps {
  runs: RunService;
  runApprovals: RunApprovals;
  runsAuth: RunsAuthenticator;
  sse: SseSessions;
}

const STOP_ALL = '/api/runs/stop-all';

/**
 * The WindieOS "Runs / VM Control" API, on the wire as the original: same paths, fields, header, answers and error
 * `detail`s (FastAPI's); Cadre's `error {code, message}` rides along. Invalid bodies and query strings are 422 as
 * there; an unknown run id of any form is 404 `Run not found`.
 */
export const runRoutes: RoutesPlugin<RunRoutesDeps> = async (app, deps) => {
  // stop-all is guarded by the control key (as the original) or a workspace's own runs key; every other route by
  // a runs key. Before the body is read, so an unauthenticated caller learns nothing from validation.
  app.decorateRequest('runsPrincipal', null as unknown as Principal);
  // A callback, not an async function: it runs on every heartbeat, and a promise per request is garbage.
  app.addHook('onRequest', (request, _reply, done) => {
    try {
      request.runsPrincipal =
        request.routeOptions.url === STOP_ALL
          ? deps.runsAuth.checkStopAll(request.headers['x-windie-runs-control-key'], request.headers['x-windie-runs-key'])
          : deps.runsAuth.check(request.headers['x-windie-runs-key']);
    } catch (err) {
      return done(err as Error);
    }
    done();
  });
  /** A workspace named in a body or query must be within the key's reach. */
  const requireWorkspace = (principal: Principal, workspaceId: string): void => {
    if (!canAccess(principal, workspaceId)) throw new ApiError('permission_denied', `this runs key is not valid for workspace ${workspaceId}`);
  };
  app.setErrorHandler(errorHandler('fastapi'));
  app.addHook('onRoute', withErrorResponses('fastapi'));

  const create = async (request: { body: CreateRunBody; headers: Record<string, string | string[] | undefined>; runsPrincipal: Principal }) => {
    requireWorkspace(request.runsPrincipal, request.body.workspace_id);
    const { run, events } = await deps.runs.create(request.body, idempotencyKeyOf(request.headers));
    return { run, events };
  };
  app.post('/api/runs/', { schema: { body: createRunBody, response: { 200: createRunResponse } } }, create);
  app.post('/api/runs', { schema: { body: createRunBody, response: { 200: createRunResponse } } }, create);

  app.get('/api/runs', { schema: { querystring: listRunsQuery, response: { 200: runListResponse } } }, async (request) => {
    requireWorkspace(request.runsPrincipal, request.query.workspace_id);
    return { runs: await deps.runs.list(request.query.workspace_id, request.query.status as never) };
  });

  app.post('/api/runs/workers/heartbeat', { schema: { body: heartbeatBody, response: { 200: heartbeatResponse } } }, async (request) => {
    requireWorkspace(request.runsPrincipal, request.body.workspace_id);
    return deps.runs.heartbeat(request.body);
  });

  app.post(STOP_ALL, { schema: { body: stopAllBody, response: { 200: stopAllResponse } } }, async (request) => {
    const workspaceId = request.body?.workspace_id ?? undefined;
    const reach = request.runsPrincipal.workspaces;
    if (reach !== 'all' && workspaceId !== reach) throw deps.runsAuth.beyondWorkspace(reach);
    return deps.runs.stopAll(workspaceId, request.body?.requested_by ?? undefined);
  });

  // The run itself, as the original (not wrapped).
  app.get('/api/runs/:run_id', { schema: { params: runParams, response: { 200: runSchema } } }, async (request) => deps.runs.get(request.runsPrincipal, request.params.run_id));

  app.get(
    '/api/runs/:run_id/events',
    { schema: { params: runParams, querystring: eventsQuery, response: { 200: runEventsResponse } } },
    async (request) => deps.runs.events(request.runsPrincipal, request.params.run_id, request.query.after_seq ?? 0, request.query.limit ?? 200),
  );

  app.get(
    '/api/runs/:run_id/stream',
    { schema: { params: runParams, querystring: { type: 'object', properties: { after_seq: { type: 'integer', minimum: 0 } } } } },
    async (request, reply) => {
      const afterSeq = resumeCursor(request, request.query.after_seq);
      deps.sse.serve(request, reply, await deps.runs.watch(request.runsPrincipal, request.params.run_id, afterSeq));
    },
  );

  // Writes to one run answer {run, latest_event}, as the original.
  app.post('/api/runs/:run_id/control', { schema: { params: runParams, body: controlBody, response: { 200: runWithEventResponse } } }, async (request) =>
    deps.runs.control(request.runsPrincipal, request.params.run_id, request.body.action, request.body.control_mode ?? undefined, request.body.requested_by ?? ''),
  );

  app.post('/api/runs/:run_id/worker-dispatched', { schema: { params: runParams, body: dispatchedBody, response: { 200: runWithEventResponse } } }, async (request) =>
    deps.runs.dispatched(request.runsPrincipal, request.params.run_id, request.body),
  );

  // Cadre's addition for the vm-agent: ask about a turn's tool calls, then poll each approval until decided.
  app.post(
    '/api/runs/:run_id/approvals',
    { schema: { params: runParams, body: proposeBody, response: { 200: proposeResponse } } },
    async (request) => ({ verdicts: await deps.runApprovals.propose(request.runsPrincipal, request.params.run_id, request.body, request.body.calls) }),
  );

  app.get(
    '/api/runs/:run_id/approvals/:approval_id',
    { schema: { params: runApprovalParams, response: { 200: approvalResponse } } },
    async (request) => ({ approval: await deps.runApprovals.poll(request.runsPrincipal, request.params.run_id, request.params.approval_id) }),
  );

  app.post('/api/runs/:run_id/events', { schema: { params: runParams, body: relayBody, response: { 200: relayResponse } } }, async (request) =>
    deps.runs.relay(request.runsPrincipal, request.params.run_id, request.body),
  );
};

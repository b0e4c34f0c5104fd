import type { FastifyRequest } from 'fastify';
import type { Principal } from '../../auth.ts';
import { idempotencyKeyOf } from '../error-handler.ts';
import type { HttpAppDeps } from '../app.ts';
import { taskIdFrom } from '../../tasks/task-service.ts';
import { resumeCursor } from '../sse.ts';
import { cancelBody, createTaskBody, eventsQuery, eventsResponse, listTasksQuery, streamQuery, taskListResponse, taskParams, taskResponse, workspaceListResponse } from '../schemas/tasks.schema.ts';
import type { RoutesPlugin } from '../routes-plugin.ts';
import { withErrorResponses } from '../schemas/errors.schema.ts';
import type { TaskRecord } from '@cadre/store';

interface TaskParams {
  task_id: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal;
  }
}

/** POST /api/tasks, GET /api/tasks (a workspace's, newest first), GET /api/tasks/:task_id, its events (polling and SSE), cancel; GET /api/workspaces. */
export const taskRoutes: RoutesPlugin<HttpAppDeps> = async (app, deps) => {
  app.decorateRequest('principal', null as unknown as Principal);
  app.addHook('onRoute', withErrorResponses('cadre'));
  app.addHook('onRequest', async (request: FastifyRequest) => {
    request.principal = deps.auth.authenticate(request.headers.authorization);
  });
  // A task id in any spelling roz accepts (upper case, no hyphens, braces, urn:uuid:) is read as its canonical
  // form before a handler sees it, so answers quote the id the task was created with.
  app.addHook('preHandler', async (request: FastifyRequest) => {
    const params = request.params as Partial<TaskParams> | undefined;
    if (typeof params?.task_id === 'string') params.task_id = taskIdFrom(params.task_id);
  });

  app.post('/api/tasks', { schema: { body: createTaskBody, response: { 200: taskResponse, 201: taskResponse } } }, async (request, reply) => {
    const { task, created } = await deps.tasks.create(request.principal, request.body, idempotencyKeyOf(request.headers));
    return reply.status(created ? 201 : 200).send({ task: shown(task) });
  });

  app.get('/api/tasks', { schema: { querystring: listTasksQuery, response: { 200: taskListResponse } } }, async (request) => {
    const { workspace_id, status, cursor, limit } = request.query;
    return deps.tasks.list(request.principal, workspace_id, { status, cursor, limit: limit ?? 50 });
  });

  app.get('/api/workspaces', { schema: { response: { 200: workspaceListResponse } } }, async (request) => ({ workspaces: await deps.tasks.workspaces(request.principal) }));

  app.get('/api/tasks/:task_id', { schema: { params: taskParams, response: { 200: taskResponse } } }, async (request) => {
    return { task: shown(await deps.tasks.get(request.principal, request.params.task_id)) };
  });

  app.get(
    '/api/tasks/:task_id/events',
    { schema: { params: taskParams, querystring: eventsQuery, response: { 200: eventsResponse } } },
    async (request) => {
      const { task_id } = request.params;
      const afterSeq = request.query.after_seq ?? 0;
      const page = await deps.tasks.events(request.principal, task_id, afterSeq, request.query.limit ?? 200);
      return { task_id, ...page };
    },
  );

  app.get(
    '/api/tasks/:task_id/stream',
    { schema: { params: taskParams, querystring: streamQuery } },
    async (request, reply) => {
      const afterSeq = resumeCursor(request, request.query.after_seq);
      const watcher = await deps.tasks.watch(request.principal, request.params.task_id, afterSeq);
      deps.sse.serve(request, reply, watcher);
    },
  );

  app.post(
    '/api/tasks/:task_id/cancel',
    { schema: { params: taskParams, body: cancelBody, response: { 200: taskResponse } } },
    async (request) => {
      const reason = request.body?.reason ?? 'cancelled by request';
      return { task: shown(await deps.tasks.cancel(request.principal, request.params.task_id, reason)) };
    },
  );
};

/** A task as the API shows it: a worker's approval rules, encoded for the worker, stay inside. */
function shown(task: TaskRecord): TaskRecord {
  return { ...task, team: { ...task.team, workers: task.team.workers.map(({ approval_rules: _encoded, ...worker }) => worker) } };
}

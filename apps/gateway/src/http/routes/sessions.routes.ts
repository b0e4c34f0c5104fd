import type { FastifyRequest } from 'fastify';
import { SessionEngineError, type SessionEngine } from '@cadre/session';
import type { Principal } from '../../auth.ts';
import type { HttpAppDeps } from '../app.ts';
import { resumeCursor } from '../sse.ts';
import { eventsQuery, streamQuery } from '../schemas/tasks.schema.ts';
import {
  abortBody, createSessionBody, inputBody, messageBody, modelBody, modesBody, reasonBody, registerToolsBody, sessionParams, toolResultBody,
  abortResponse, cancelResponse, messageResponse, messagesResponse, modelsResponse, queuedInputResponse, registerToolsResponse, sessionEventsResponse,
  sessionResponse, toolResultResponse,
} from '../schemas/sessions.schema.ts';
import { withErrorResponses } from '../schemas/errors.schema.ts';
import type { RoutesPlugin } from '../routes-plugin.ts';

export interface SessionRoutesDeps {
  sessions: SessionEngine;
}

/**
 * The HTTP session API (ours): the same engine as roz StreamSession, for web clients and scripts. Auth, error
 * shape and limits are the tasks API's.
 */
export const sessionRoutes: RoutesPlugin<HttpAppDeps> = async (app, deps) => {
  const { sessions } = deps;
  app.decorateRequest('principal', null as unknown as Principal);
  app.addHook('onRoute', withErrorResponses('cadre'));
  app.addHook('onRequest', async (request: FastifyRequest) => {
    request.principal = deps.auth.authenticate(request.headers.authorization);
  });

  app.post('/api/sessions', { schema: { body: createSessionBody, response: { 201: sessionResponse } } }, async (request, reply) => {
    return reply.status(201).send({ session: await sessions.create(request.principal, request.body) });
  });

  app.get('/api/models', { schema: { response: { 200: modelsResponse } } }, async () => {
    const models = sessions.models();
    return { models, default: models[0] };
  });

  app.get('/api/sessions/:session_id', { schema: { params: sessionParams, response: { 200: sessionResponse } } }, async (request) => {
    return { session: await sessions.get(request.principal, request.params.session_id) };
  });

  app.post('/api/sessions/:session_id/messages', { schema: { params: sessionParams, body: messageBody, response: { 202: messageResponse } } }, async (request, reply) => {
    const { session_id } = request.params;
    const { streaming_behavior, ...message } = request.body;
    try {
      const { message_id } = await sessions.sendMessage(request.principal, session_id, message);
      return await reply.status(202).send({ session_id, message_id });
    } catch (err) {
      // Steers and follow-ups are text: a message with images is not queued as one.
      if (!streaming_behavior || message.images?.length || !(err instanceof SessionEngineError) || err.code !== 'turn_in_progress') throw err;
      const input = { content: message.content, ...(message.message_id && { input_id: message.message_id }) };
      const queued = await sessions.queueInput(request.principal, session_id, streaming_behavior, input);
      return reply.status(202).send({ session_id, message_id: queued.input_id, ...queued });
    }
  });

  app.get('/api/sessions/:session_id/messages', { schema: { params: sessionParams, response: { 200: messagesResponse } } }, async (request) => {
    const { session_id } = request.params;
    return { session_id, messages: await sessions.messages(request.principal, session_id) };
  });

  app.put('/api/sessions/:session_id/model', { schema: { params: sessionParams, body: modelBody, response: { 200: sessionResponse } } }, async (request) => {
    return { session: await sessions.setModel(request.principal, request.params.session_id, request.body.model) };
  });

  app.post('/api/sessions/:session_id/steer', { schema: { params: sessionParams, body: inputBody, response: { 202: queuedInputResponse } } }, async (request, reply) => {
    const { session_id } = request.params;
    return reply.status(202).send({ session_id, ...(await sessions.queueInput(request.principal, session_id, 'steer', request.body)) });
  });

  app.post('/api/sessions/:session_id/follow-ups', { schema: { params: sessionParams, body: inputBody, response: { 202: queuedInputResponse } } }, async (request, reply) => {
    const { session_id } = request.params;
    return reply.status(202).send({ session_id, ...(await sessions.queueInput(request.principal, session_id, 'follow_up', request.body)) });
  });

  app.post('/api/sessions/:session_id/abort', { schema: { params: sessionParams, body: abortBody, response: { 200: abortResponse } } }, async (request) => {
    const { session_id } = request.params;
    return { session_id, ...(await sessions.abort(request.principal, session_id, request.body?.prompt)) };
  });

  app.patch('/api/sessions/:session_id/modes', { schema: { params: sessionParams, body: modesBody, response: { 200: sessionResponse } } }, async (request) => {
    return { session: await sessions.setInputModes(request.principal, request.params.session_id, request.body) };
  });

  app.post('/api/sessions/:session_id/tool-results', { schema: { params: sessionParams, body: toolResultBody, response: { 200: toolResultResponse } } }, async (request) => {
    const { session_id } = request.params;
    return { session_id, ...(await sessions.submitToolResult(request.principal, session_id, request.body)) };
  });

  app.post('/api/sessions/:session_id/tools', { schema: { params: sessionParams, body: registerToolsBody, response: { 200: registerToolsResponse } } }, async (request) => {
    const { session_id } = request.params;
    return { session_id, ...(await sessions.registerTools(request.principal, session_id, request.body)) };
  });

  app.post('/api/sessions/:session_id/cancel', { schema: { params: sessionParams, body: reasonBody, response: { 200: cancelResponse } } }, async (request) => {
    const { session_id } = request.params;
    const cancelled = await sessions.cancelTurn(request.principal, session_id, request.body?.reason ?? 'cancelled by request');
    return { session_id, cancelled };
  });

  app.delete('/api/sessions/:session_id', { schema: { params: sessionParams, body: reasonBody, response: { 200: sessionResponse } } }, async (request) => {
    return { session: await sessions.close(request.principal, request.params.session_id, request.body?.reason ?? 'closed by request') };
  });

  app.get(
    '/api/sessions/:session_id/events',
    { schema: { params: sessionParams, querystring: eventsQuery, response: { 200: sessionEventsResponse } } },
    async (request) => {
      const { session_id } = request.params;
      const page = await sessions.events(request.principal, session_id, request.query.after_seq ?? 0, request.query.limit ?? 200);
      return { session_id, ...page };
    },
  );

  app.get(
    '/api/sessions/:session_id/stream',
    { schema: { params: sessionParams, querystring: streamQuery } },
    async (request, reply) => {
      const afterSeq = resumeCursor(request, request.query.after_seq);
      const watcher = await sessions.watch(request.principal, request.params.session_id, afterSeq);
      deps.sse.serve(request, reply, watcher, 'session');
    },
  );
};

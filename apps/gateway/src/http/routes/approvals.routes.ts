import type { FastifyRequest } from 'fastify';
import type { HttpAppDeps } from '../app.ts';
import type { Principal } from '../../auth.ts';
import {
  approvalParams, bulkDecisionBody, decisionBody, inboxStreamQuery, listApprovalsQuery, policyParams, policyBody,
  approvalListResponse, approvalResponse, bulkDecisionResponse, policyResponse,
} from '../schemas/approvals.schema.ts';
import { withErrorResponses } from '../schemas/errors.schema.ts';
import { resumeCursor } from '../sse.ts';
import type { RoutesPlugin } from '../routes-plugin.ts';

/**
 * Tool approvals: a workspace's policy (PUT/GET /api/workspaces/:workspace_id/approval-policy), the inbox
 * (GET /api/approvals, paginated), its live stream (SSE), one approval and its decision, decisions in bulk.
 */
export const approvalRoutes: RoutesPlugin<HttpAppDeps> = async (app, deps) => {
  app.decorateRequest('principal', null as unknown as Principal);
  app.addHook('onRoute', withErrorResponses('cadre'));
  app.addHook('onRequest', async (request: FastifyRequest) => {
    request.principal = deps.auth.authenticate(request.headers.authorization);
  });

  app.get('/api/workspaces/:workspace_id/approval-policy', { schema: { params: policyParams, response: { 200: policyResponse } } }, async (request) => {
    return { policy: await deps.approvals.getPolicy(request.principal, request.params.workspace_id) };
  });

  app.put(
    '/api/workspaces/:workspace_id/approval-policy',
    { schema: { params: policyParams, body: policyBody, response: { 200: policyResponse } } },
    async (request) => ({ policy: await deps.approvals.setPolicy(request.principal, request.params.workspace_id, request.body) }),
  );

  app.get(
    '/api/approvals',
    { schema: { querystring: listApprovalsQuery, response: { 200: approvalListResponse } } },
    async (request) => deps.approvals.list(request.principal, request.query),
  );

  // Registered before /api/approvals/:approval_id, which would otherwise take `stream` for an id.
  app.get(
    '/api/approvals/stream',
    { schema: { querystring: inboxStreamQuery } },
    async (request, reply) => {
      const afterSeq = resumeCursor(request, request.query.after_seq);
      const watcher = await deps.approvals.watch(request.principal, request.query.workspace_id, afterSeq);
      deps.sse.serve(request, reply, watcher);
    },
  );

  app.post(
    '/api/approvals/decisions',
    { schema: { body: bulkDecisionBody, response: { 200: bulkDecisionResponse } } },
    async (request) => {
      const { ids, filter, ...decision } = request.body;
      return { results: await deps.approvals.decideMany(request.principal, { ...(ids && { ids }), ...(filter && { filter }), decision }) };
    },
  );

  app.get('/api/approvals/:approval_id', { schema: { params: approvalParams, response: { 200: approvalResponse } } }, async (request) => {
    return { approval: await deps.approvals.get(request.principal, request.params.approval_id) };
  });

  app.post(
    '/api/approvals/:approval_id/decision',
    { schema: { params: approvalParams, body: decisionBody, response: { 200: approvalResponse } } },
    async (request) => ({ approval: await deps.approvals.decide(request.principal, request.params.approval_id, request.body) }),
  );
};

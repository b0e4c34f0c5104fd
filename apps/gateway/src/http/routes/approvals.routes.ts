import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { ApprovalStatus } from '@cadre/protocol';
import type { ApprovalPolicy } from '@cadre/store';
import type { HttpAppDeps } from '../app.ts';
import type { Principal } from '../../auth.ts';
import { approvalParams, decisionBody, listApprovalsQuery, policyParams, policyBody } from '../schemas/approvals.schema.ts';

/**
 * Tool approvals: a workspace's policy (PUT/GET /api/workspaces/:workspace_id/approval-policy), the inbox
 * (GET /api/approvals), one approval and its decision.
 */
export const approvalRoutes: FastifyPluginAsync<HttpAppDeps> = async (app, deps) => {
  app.decorateRequest('principal', null as unknown as Principal);
  app.addHook('onRequest', async (request: FastifyRequest) => {
    request.principal = deps.auth.authenticate(request.headers.authorization);
  });

  app.get<{ Params: { workspace_id: string } }>('/api/workspaces/:workspace_id/approval-policy', { schema: { params: policyParams } }, async (request) => {
    return { policy: await deps.approvals.getPolicy(request.principal, request.params.workspace_id) };
  });

  app.put<{ Params: { workspace_id: string }; Body: ApprovalPolicy }>(
    '/api/workspaces/:workspace_id/approval-policy',
    { schema: { params: policyParams, body: policyBody } },
    async (request) => ({ policy: await deps.approvals.setPolicy(request.principal, request.params.workspace_id, request.body) }),
  );

  app.get<{ Querystring: { workspace_id: string; status?: ApprovalStatus; task_id?: string; session_id?: string } }>(
    '/api/approvals',
    { schema: { querystring: listApprovalsQuery } },
    async (request) => ({ approvals: await deps.approvals.list(request.principal, request.query) }),
  );

  app.get<{ Params: { approval_id: string } }>('/api/approvals/:approval_id', { schema: { params: approvalParams } }, async (request) => {
    return { approval: await deps.approvals.get(request.principal, request.params.approval_id) };
  });

  app.post<{ Params: { approval_id: string }; Body: { approved: boolean; reason?: string } }>(
    '/api/approvals/:approval_id/decision',
    { schema: { params: approvalParams, body: decisionBody } },
    async (request) => ({ approval: await deps.approvals.decide(request.principal, request.params.approval_id, request.body.approved, request.body.reason) }),
  );
};

import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { FastifyAdapter } from '@bull-board/fastify';
import type { Queue } from 'bullmq';
import type { FastifyPluginAsync } from 'fastify';
import { basicAsBearer, type Authenticator } from '../../auth.ts';
import { ApiError, httpStatusOf } from '../../errors.ts';

export const QUEUE_ADMIN_PATH = '/admin/queues';

export interface QueueAdminDeps {
  auth: Authenticator;
  adminQueues: Queue[];
}

/**
 * bull-board under /admin/queues, behind the API key. A browser cannot add a bearer header to a page it
 * navigates to, so the key is also taken as the password of HTTP Basic auth (any user name): the browser asks
 * once and sends it with every request of the page. Only a key valid for every workspace may see the queues,
 * which hold every workspace's jobs.
 */
export const queueAdminPlugin: FastifyPluginAsync<QueueAdminDeps> = async (app, deps) => {
  // The answer is sent here rather than thrown: bull-board's routes have an error handler of their own (500).
  app.addHook('onRequest', async (request, reply) => {
    try {
      const principal = deps.auth.authenticate(basicAsBearer(request.headers.authorization));
      if (principal.workspaces !== 'all') throw new ApiError('permission_denied', 'the queue admin needs a key valid for every workspace');
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      if (err.code === 'unauthenticated') reply.header('www-authenticate', 'Basic realm="Cadre queues", charset="UTF-8"');
      return reply.status(httpStatusOf(err.code)).send({ error: { code: err.code, message: err.message } });
    }
  });
  const serverAdapter = new FastifyAdapter();
  createBullBoard({ queues: deps.adminQueues.map((q) => new BullMQAdapter(q, { readOnlyMode: false })), serverAdapter, options: { uiConfig: { boardTitle: 'Cadre queues' } } });
  serverAdapter.setBasePath(QUEUE_ADMIN_PATH);
  await app.register(serverAdapter.registerPlugin(), { prefix: QUEUE_ADMIN_PATH });
};


import websocket from '@fastify/websocket';
import type { FastifyPluginAsync } from 'fastify';
import { WindieSocket, type WindieSocketDeps } from './windie-socket.ts';

/** 10 MB, the reference's message limit. */
const MAX_MESSAGE_BYTES = 10 * 1024 * 1024;

/** GET /ws upgrades to the WindieOS agent socket on the gateway's port. */
export const windiePlugin: FastifyPluginAsync<WindieSocketDeps> = async (app, deps) => {
  await app.register(websocket, { options: { maxPayload: MAX_MESSAGE_BYTES } });
  app.get('/ws', { websocket: true }, (socket, request) => {
    new WindieSocket(deps, socket, request.headers.authorization);
  });
};

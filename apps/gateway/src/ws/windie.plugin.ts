import websocket from '@fastify/websocket';
import type { FastifyPluginAsync } from 'fastify';
import { GATEWAY_SHUTTING_DOWN } from '../errors.ts';
import { GOING_AWAY, WindieSocket, type WindieSocketDeps } from './windie-socket.ts';

/** 10 MB, the reference's message limit. */
const MAX_MESSAGE_BYTES = 10 * 1024 * 1024;

/** How many sockets are open (the gateway's cadre_sessions_open{protocol="ws"}). */
export interface SocketCounter {
  onOpen(): void;
  onClose(): void;
}

/** GET /ws upgrades to the WindieOS agent socket on the gateway's port. */
export const windiePlugin: FastifyPluginAsync<WindieSocketDeps & { sockets?: SocketCounter }> = async (app, deps) => {
  await app.register(websocket, {
    options: { maxPayload: MAX_MESSAGE_BYTES },
    // A draining gateway tells every socket it is going away (the plugin's own close sends no code), so WindieOS
    // clients reconnect to another gateway. Sockets streaming a conversation were closed so already (WindieSocket).
    preClose(done) {
      for (const client of this.websocketServer.clients) client.close(GOING_AWAY, GATEWAY_SHUTTING_DOWN);
      done();
    },
  });
  app.get('/ws', { websocket: true }, (socket, request) => {
    deps.sockets?.onOpen();
    socket.once('close', () => deps.sockets?.onClose());
    new WindieSocket(deps, socket, request.headers.authorization);
  });
};

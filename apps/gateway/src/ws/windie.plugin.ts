import websocket from '@fastify/websocket';
import type { FastifyPluginAsync } from 'fastify';
import type { AuthRefusalLog } from '../auth-refusals.ts';
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
export const windiePlugin: FastifyPluginAsync<WindieSocketDeps & { sockets?: SocketCounter; refusals?: AuthRefusalLog }> = async (app, deps) => {
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
    // A refused key closes the socket after the upgrade (1008), so the HTTP hook never sees it: logged here.
    new WindieSocket(deps, socket, request.headers.authorization, (err) => {
      if (err.code !== 'unauthenticated' && err.code !== 'permission_denied') return;
      deps.refusals?.record({
        edge: 'ws', route: '/ws', status: 'close 1008', forbidden: err.code === 'permission_denied', client: request.ip, credentials: (header) => request.headers[header],
      });
    });
  });
};

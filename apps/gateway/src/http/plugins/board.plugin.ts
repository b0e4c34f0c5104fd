import fastifyStatic from '@fastify/static';
import type { FastifyPluginAsync } from 'fastify';
import { BOARD_HEADERS, BOARD_ROOT } from '@cadre/board';

/**
 * The operator board at `/`: static files only, no key needed to load them (they hold no data; every API call
 * the page makes carries the key). One route per file (`wildcard: false`), so any other path is the API's 404.
 */
export const boardPlugin: FastifyPluginAsync = async (app) => {
  await app.register(fastifyStatic, {
    root: BOARD_ROOT,
    prefix: '/',
    wildcard: false,
    index: 'index.html',
    setHeaders(reply) {
      reply.headers(BOARD_HEADERS);
    },
  });
};

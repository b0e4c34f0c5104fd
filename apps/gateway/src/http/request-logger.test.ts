import { Writable } from 'node:stream';
import fastify, { type FastifyBaseLogger } from 'fastify';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { lazyRequestLogger } from './request-logger.ts';

/** A Fastify app whose logger writes JSON lines into `lines` and counts the child loggers made from it. */
function appWithLogger(level: string) {
  const lines: Record<string, unknown>[] = [];
  const made = { children: 0 };
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  const logger = pino({ level, onChild: () => void made.children++ }, sink);
  const app = fastify({ loggerInstance: logger as FastifyBaseLogger, childLoggerFactory: lazyRequestLogger });
  return { app, lines, made };
}

describe('request loggers', () => {
  let close: (() => Promise<unknown>) | undefined;
  afterEach(async () => close?.());

  it('a request that logs nothing at its level makes no child logger; one that does logs with its request id', async () => {
    const { app, lines, made } = appWithLogger('info');
    close = () => app.close();
    app.get('/quiet', { logLevel: 'warn' }, async (request) => {
      request.log.info({ step: 1 }, 'below the route level');
      return { ok: true };
    });
    app.get('/fails', { logLevel: 'warn' }, async (request) => {
      request.log.info('below the route level');
      request.log.error({ step: 2 }, 'logged');
      return { ok: false };
    });
    await app.ready();
    const childrenAtStart = made.children;

    expect((await app.inject('/quiet')).statusCode).toBe(200);
    expect(made.children - childrenAtStart).toBe(0);
    expect(lines.filter((l) => l.msg === 'below the route level')).toEqual([]);

    const res = await app.inject('/fails');
    expect(res.statusCode).toBe(200);
    expect(made.children - childrenAtStart).toBe(1);
    const logged = lines.filter((l) => l.msg === 'logged');
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ level: 50, step: 2, reqId: expect.any(String) });
    expect(lines.filter((l) => l.msg === 'below the route level')).toEqual([]);
  });

  it("a route without a level of its own logs at the app's level, incoming and completed lines included", async () => {
    const { app, lines } = appWithLogger('info');
    close = () => app.close();
    app.get('/chatty', async (request) => {
      request.log.info('handler line');
      expect(request.log.level).toBe('info');
      return { ok: true };
    });
    await app.ready();
    await app.inject('/chatty');
    const ids = new Set(lines.filter((l) => ['incoming request', 'handler line', 'request completed'].includes(l.msg as string)).map((l) => l.reqId));
    expect(lines.map((l) => l.msg)).toEqual(['incoming request', 'handler line', 'request completed']);
    expect(ids.size).toBe(1);
    expect([...ids][0]).toEqual(expect.any(String));
  });
});

import type { FastifyInstance, FastifyReply } from 'fastify';

/**
 * For tests: every JSON answer is compared with the object its handler returned. A response schema serializes
 * only the fields it names (and coerces types, e.g. null to "" for a plain string), so one that forgets a field
 * would drop it without a word; here that answers 500 naming the field, and the test that made the request fails.
 * Registered on the root instance before the routes, so it sees every route's replies, error bodies included.
 */
export function checkResponsesAgainstHandlers(app: FastifyInstance): void {
  const returned = new WeakMap<FastifyReply, unknown>();
  app.addHook('preSerialization', async (_request, reply, payload) => {
    returned.set(reply, payload);
    return payload;
  });
  app.addHook('onSend', async (request, reply, payload) => {
    if (!returned.has(reply) || typeof payload !== 'string') return payload;
    const difference = firstDifference(JSON.parse(JSON.stringify(returned.get(reply))), JSON.parse(payload), '');
    if (!difference) return payload;
    const message = `the response schema of ${request.method} ${request.routeOptions.url ?? request.url} (${reply.statusCode}) ${difference}`;
    request.log.error({ url: request.url }, message);
    void reply.code(500);
    return JSON.stringify({ error: { code: 'response_schema_mismatch', message } });
  });
}

/** Where `sent` differs from `expected` (both JSON values), as words; undefined when equal. */
function firstDifference(expected: unknown, sent: unknown, path: string): string | undefined {
  const at = path || 'the body';
  if (Array.isArray(expected) && Array.isArray(sent)) {
    if (expected.length !== sent.length) return `changes the length of ${at}`;
    for (let i = 0; i < expected.length; i++) {
      const d = firstDifference(expected[i], sent[i], `${path}[${i}]`);
      if (d) return d;
    }
    return undefined;
  }
  if (isObject(expected) && isObject(sent)) {
    for (const key of Object.keys(expected)) {
      if (!(key in sent)) return `drops ${path ? `${path}.` : ''}${key}`;
      const d = firstDifference(expected[key], sent[key], path ? `${path}.${key}` : key);
      if (d) return d;
    }
    const added = Object.keys(sent).find((key) => !(key in expected));
    return added === undefined ? undefined : `adds ${path ? `${path}.` : ''}${added}`;
  }
  return Object.is(expected, sent) ? undefined : `changes ${at} from ${JSON.stringify(expected)} to ${JSON.stringify(sent)}`;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

import fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { checkResponsesAgainstHandlers } from './response-check.ts';

const run = { run_id: 'r1', worker: null, files: [{ artifact_id: 'a', filename: null }], metadata: { k: 'v' } };
const fullSchema = {
  type: 'object', additionalProperties: false,
  properties: {
    run_id: { type: 'string' },
    worker: { type: ['string', 'null'] },
    files: { type: 'array', items: { type: 'object', properties: { artifact_id: { type: 'string' }, filename: { type: ['string', 'null'] } } } },
    metadata: { type: 'object', additionalProperties: true },
  },
} as const;

/** One route answering `run` through `schema`, with the check on. */
async function answer(schema: object, status = 200): Promise<{ statusCode: number; body: unknown }> {
  const app = fastify();
  checkResponsesAgainstHandlers(app);
  app.get('/run', { schema: { response: { [status]: schema } } }, async (_request, reply) => reply.status(status).send(run));
  const res = await app.inject({ method: 'GET', url: '/run' });
  await app.close();
  return { statusCode: res.statusCode, body: res.json() };
}

describe('response schemas checked against their handlers (tests run gateways with this on)', () => {
  it('lets an answer through untouched when its schema names every field', async () => {
    expect(await answer(fullSchema)).toEqual({ statusCode: 200, body: run });
  });

  it('answers 500 naming the field a schema forgot, at any depth', async () => {
    const { files: _files, ...withoutFiles } = fullSchema.properties;
    expect(await answer({ ...fullSchema, properties: withoutFiles })).toEqual({
      statusCode: 500,
      body: { error: { code: 'response_schema_mismatch', message: 'the response schema of GET /run (200) drops files' } },
    });
    const shallowFiles = { ...fullSchema.properties, files: { type: 'array', items: { type: 'object', properties: { artifact_id: { type: 'string' } } } } };
    expect((await answer({ ...fullSchema, properties: shallowFiles }, 404)).body).toMatchObject({ error: { message: 'the response schema of GET /run (404) drops files[0].filename' } });
    const closedMetadata = { ...fullSchema.properties, metadata: { type: 'object' } };
    expect((await answer({ ...fullSchema, properties: closedMetadata })).body).toMatchObject({ error: { message: 'the response schema of GET /run (200) drops metadata.k' } });
  });

  it('answers 500 when a schema changes a value (a null written as "" by a plain string type)', async () => {
    const notNullable = { ...fullSchema.properties, worker: { type: 'string' } };
    expect((await answer({ ...fullSchema, properties: notNullable })).body).toMatchObject({
      error: { code: 'response_schema_mismatch', message: 'the response schema of GET /run (200) changes worker from null to ""' },
    });
  });
});

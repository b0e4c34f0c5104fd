// The error bodies of both API dialects (error-handler.ts), as response schemas for every status from 400 up.
import type { RouteOptions } from 'fastify';
import type { ErrorDialect } from '../error-handler.ts';

const error = {
  type: 'object', additionalProperties: false,
  required: ['code', 'message'],
  properties: { code: { type: 'string' }, message: { type: 'string' } },
} as const;

/** Tasks, approvals and sessions: `{error: {code, message}}`. */
const cadreErrorResponse = { type: 'object', additionalProperties: false, required: ['error'], properties: { error } } as const;

/** The runs API, as FastAPI answers: `detail` (text, or the list of schema problems), with Cadre's `error` beside it. */
const fastApiErrorResponse = {
  type: 'object', additionalProperties: false,
  required: ['detail', 'error'],
  properties: {
    detail: {
      anyOf: [
        { type: 'string' },
        {
          type: 'array',
          items: {
            type: 'object', additionalProperties: false,
            required: ['loc', 'msg', 'type'],
            properties: { loc: { type: 'array', items: { type: ['string', 'integer'] } }, msg: { type: 'string' }, type: { type: 'string' } },
          },
        },
      ],
    },
    error,
  },
} as const;

/**
 * An onRoute hook giving each route of a plugin its dialect's error body for 4xx and 5xx (a route's own schema for
 * a status wins), so no route lists them.
 */
export function withErrorResponses(dialect: ErrorDialect): (route: RouteOptions) => void {
  const body = dialect === 'cadre' ? cadreErrorResponse : fastApiErrorResponse;
  return (route) => {
    route.schema = { ...route.schema, response: { '4xx': body, '5xx': body, ...(route.schema?.response as object | undefined) } };
  };
}

import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError, httpStatusOf, toApiError } from '../errors.ts';

/**
 * How an API spells its errors. `cadre`: `{error: {code, message}}`, schema errors 400. `fastapi` (the runs API,
 * as the WindieOS original): FastAPI's `detail` (a list of `{loc, msg, type}` for schema errors, which are 422),
 * with Cadre's `error` riding along.
 */
export type ErrorDialect = 'cadre' | 'fastapi';

/** Fastify's own client errors (bad JSON, wrong content type, body too large) in the API's codes, not FST_ERR_*. */
const CLIENT_ERROR_CODES: Record<number, string> = {
  400: 'invalid_argument',
  404: 'not_found',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
};

/** The one error handler: the message of an error below 500, a generic text (and a log line) at 500. */
export function errorHandler(dialect: ErrorDialect) {
  const send = (reply: FastifyReply, status: number, code: string, message: string, detail: unknown = message) =>
    reply.status(status).send(dialect === 'fastapi' ? { detail, error: { code, message } } : { error: { code, message } });

  return (err: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply => {
    const api = toApiError(err);
    if (api) return send(reply, httpStatusOf(api.code), api.code, api.message);
    if (err.validation) {
      if (dialect === 'cadre') return send(reply, 400, 'invalid_argument', validationMessage(err.validationContext ?? 'request', err.validation, err.message));
      const detail = fastApiDetail(err);
      const first = detail[0];
      return send(reply, 422, 'invalid_argument', first ? `${first.loc.join('.')}: ${first.msg}` : 'invalid request', detail);
    }
    const status = err.statusCode ?? 500;
    if (status < 500) {
      const message = status === 415 ? `unsupported content-type "${String(request.headers['content-type'] ?? '').slice(0, 100)}"; send application/json` : err.message;
      return send(reply, status, CLIENT_ERROR_CODES[status] ?? 'bad_request', message);
    }
    request.log.error({ err, url: request.routeOptions.url }, 'request failed');
    return send(reply, 500, 'internal', 'internal error', 'Internal Server Error');
  };
}

/** The first schema error as one sentence that names the offending field, unknown fields included. */
function validationMessage(context: string, errors: NonNullable<FastifyError['validation']>, fallback: string): string {
  const first = errors[0];
  if (!first) return `${context}${fallback.replace(/^(body|querystring|params|headers)/, '')}`;
  const where = `${context}${first.instancePath}`;
  const unknown = first.keyword === 'additionalProperties' ? (first.params as { additionalProperty?: unknown }).additionalProperty : undefined;
  if (typeof unknown === 'string') return `${where} has an unknown field "${unknown.slice(0, 64)}"`;
  return `${where} ${first.message ?? 'is invalid'}`;
}

/** One validation problem as FastAPI reports it (`loc`, `msg`, `type`), so clients of the original read it. */
function fastApiDetail(err: FastifyError): { loc: (string | number)[]; msg: string; type: string }[] {
  return (err.validation ?? []).map((v) => {
    const loc: (string | number)[] = [err.validationContext === 'querystring' ? 'query' : (err.validationContext ?? 'body')];
    for (const part of v.instancePath.split('/').slice(1)) loc.push(/^\d+$/.test(part) ? Number(part) : part);
    const params = v.params as { missingProperty?: string; additionalProperty?: string };
    if (v.keyword === 'required') return { loc: [...loc, String(params.missingProperty)], msg: 'Field required', type: 'missing' };
    if (v.keyword === 'additionalProperties') return { loc: [...loc, String(params.additionalProperty).slice(0, 64)], msg: 'Extra inputs are not permitted', type: 'extra_forbidden' };
    return { loc, msg: v.message ?? 'is invalid', type: v.keyword };
  });
}

/** A request's Idempotency-Key (the first, if sent twice); 1 to 255 characters or the request is refused. */
export function idempotencyKeyOf(headers: Record<string, string | string[] | undefined>): string | undefined {
  const header = headers['idempotency-key'];
  const key = Array.isArray(header) ? header[0] : header;
  if (key !== undefined && (key.length === 0 || key.length > 255)) throw new ApiError('invalid_argument', 'Idempotency-Key must be 1 to 255 characters');
  return key;
}

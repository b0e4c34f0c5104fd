// The scripted model's HTTP side: an OpenAI-compatible server on node:http. What it answers is decided by
// script.ts and directives.ts; this file handles routing, auth, failure injection, timing and streaming.

import { createHash, timingSafeEqual } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { DirectiveError, isRecord, parseDirectives, type ChatMessage, type Directives } from './directives.ts';
import { completionBody, completionChunks, errorBody, errorForStatus, type ErrorBody } from './openai-format.ts';
import { planReply } from './script.ts';

export const SCRIPTED_MODEL_NAME = 'cadre-scripted';
const MAX_BODY_BYTES = 16 * 1024 * 1024;
/** Sent with injected failures so clients that honour it (the `openai` package does) retry at once. */
const RETRY_AFTER_MS = '10';

export type ScriptedModelLogger = { info(obj: object, msg: string): void };

export type ScriptedModelOptions = {
  /** 0 (the default) picks a free port. */
  port?: number;
  /** Defaults to 127.0.0.1. */
  host?: string;
  /** When set, every request needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  logger?: ScriptedModelLogger;
};

export type ScriptedModel = {
  /** Base URL for the `openai` client, ending in /v1. */
  url: string;
  port: number;
  /** HTTP requests received so far, whatever their outcome. */
  requestCount(): number;
  /** Resolves once a request has come to `hold=<name>` (it waits there until release(name); a test acts meanwhile). */
  holding(name: string): Promise<void>;
  /** Lets the requests waiting at `hold=<name>` answer, and every later one pass it. */
  release(name: string): void;
  /** Stops listening and ends every open request, hanging ones included. Idempotent. */
  close(): Promise<void>;
};

type ChatRequest = {
  model: string;
  messages: ChatMessage[];
  tools: unknown[];
  stream: boolean;
  includeUsage: boolean;
};

class RequestError extends Error {
  readonly status: number;
  readonly body: ErrorBody;
  constructor(status: number, body: ErrorBody) {
    super(body.error.message);
    this.status = status;
    this.body = body;
  }
}

export async function startScriptedModel(opts: ScriptedModelOptions = {}): Promise<ScriptedModel> {
  const host = opts.host ?? '127.0.0.1';
  const expectedAuth = opts.apiKey === undefined ? undefined : digest(`Bearer ${opts.apiKey}`);
  /** fail=<status>*<n> counters, keyed by a hash of the request's messages. */
  const failuresServed = new Map<string, number>();
  let requests = 0;
  let completions = 0;
  /** hold=<name> gates: whether a request came to each, and whether the test released it. */
  const holds = new Map<string, { reached: PromiseWithResolvers<void>; released: PromiseWithResolvers<void> }>();
  const hold = (name: string) => {
    let gate = holds.get(name);
    if (!gate) holds.set(name, (gate = { reached: Promise.withResolvers<void>(), released: Promise.withResolvers<void>() }));
    return gate;
  };

  const server = createServer((req, res) => {
    requests += 1;
    // The request's lifetime: aborted when the client goes away or close() destroys the socket.
    const lifetime = new AbortController();
    res.once('close', () => lifetime.abort());
    handle(req, res, lifetime.signal).catch((err: unknown) => {
      if (err instanceof RequestError) return sendJson(res, err.status, err.body);
      if (res.headersSent) return void res.destroy();
      sendJson(res, 500, errorBody('The scripted model failed unexpectedly.', 'server_error'));
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse, signal: AbortSignal): Promise<void> {
    if (expectedAuth && !authorized(req.headers.authorization, expectedAuth)) {
      throw new RequestError(401, errorBody('Incorrect API key provided.', 'invalid_request_error', 'invalid_api_key'));
    }
    const path = new URL(req.url ?? '/', 'http://scripted.invalid').pathname.replace(/\/+$/, '');
    if (req.method === 'GET' && path === '/v1/models') {
      return sendJson(res, 200, { object: 'list', data: [modelObject(SCRIPTED_MODEL_NAME)] });
    }
    if (req.method === 'GET' && path.startsWith('/v1/models/')) {
      return sendJson(res, 200, modelObject(decodeURIComponent(path.slice('/v1/models/'.length))));
    }
    if (req.method === 'POST' && path === '/v1/chat/completions') {
      return chatCompletion(parseChatRequest(await readBody(req)), res, signal);
    }
    throw new RequestError(404, errorBody(`Invalid URL (${req.method} ${path || '/'})`, 'invalid_request_error'));
  }

  async function chatCompletion(request: ChatRequest, res: ServerResponse, signal: AbortSignal): Promise<void> {
    let directives: Directives;
    try {
      directives = parseDirectives(request.messages);
    } catch (err) {
      if (err instanceof DirectiveError) throw new RequestError(400, errorBody(err.message, 'invalid_request_error', err.code));
      throw err;
    }
    const reply = planReply(request.messages, request.tools, directives);
    // Counted on arrival, so concurrent identical requests share the budget of failures.
    const failStatus = takeFailure(directives, request.messages);

    if (directives.delayMs > 0 && !(await wait(directives.delayMs, signal))) return;
    if (directives.hold !== undefined) {
      const gate = hold(directives.hold);
      gate.reached.resolve();
      await Promise.race([gate.released.promise, untilAborted(signal)]);
      if (signal.aborted) return;
    }
    if (directives.hang) {
      if (request.stream) {
        res.writeHead(200, sseHeaders());
        res.flushHeaders();
      }
      return untilAborted(signal);
    }
    if (failStatus !== undefined) {
      const message = `Scripted failure: fail=${failStatus}`;
      return sendJson(res, failStatus, errorForStatus(failStatus, message), { 'retry-after-ms': RETRY_AFTER_MS });
    }

    completions += 1;
    const meta = { id: `chatcmpl-scripted-${completions}`, created: Math.floor(Date.now() / 1000), model: request.model };
    if (!request.stream) return sendJson(res, 200, completionBody(meta, reply));

    res.writeHead(200, sseHeaders());
    const events = completionChunks(meta, reply, request.includeUsage).map((chunk) => JSON.stringify(chunk));
    events.push('[DONE]');
    for (const [i, event] of events.entries()) {
      if (i > 0 && directives.chunkDelayMs > 0 && !(await wait(directives.chunkDelayMs, signal))) return;
      if (!(await writeEvent(res, event, signal))) return;
    }
    res.end();
  }

  function takeFailure(directives: Directives, messages: ChatMessage[]): number | undefined {
    const fail = directives.fail;
    if (!fail) return undefined;
    if (fail.times === undefined) return fail.status;
    const key = createHash('sha256').update(JSON.stringify(messages)).digest('hex');
    const served = failuresServed.get(key) ?? 0;
    if (served >= fail.times) return undefined;
    failuresServed.set(key, served + 1);
    return fail.status;
  }

  server.listen(opts.port ?? 0, host);
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('scripted model: no TCP address');
  const url = `http://${urlHost(host)}:${address.port}/v1`;
  opts.logger?.info({ url }, 'scripted model listening');

  let closing: Promise<void> | undefined;
  return {
    url,
    port: address.port,
    requestCount: () => requests,
    holding: (name) => hold(name).reached.promise,
    release: (name) => hold(name).released.resolve(),
    close() {
      closing ??= new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        // Ends idle keep-alive sockets and hanging requests alike; their lifetimes abort with them.
        server.closeAllConnections();
      });
      return closing;
    },
  };
}

function parseChatRequest(raw: string): ChatRequest {
  const invalid = (message: string): RequestError => new RequestError(400, errorBody(message, 'invalid_request_error'));
  let body: unknown;
  try {
    body = JSON.parse(raw);
  } catch {
    throw invalid('We could not parse the JSON body of your request. Expected a JSON object.');
  }
  if (!isRecord(body)) throw invalid('The request body must be a JSON object.');
  const { model, messages, tools, stream, stream_options: streamOptions } = body;
  if (!Array.isArray(messages) || messages.length === 0) throw invalid("'messages' must be a non-empty array.");
  for (const [i, message] of messages.entries()) {
    if (!isRecord(message) || typeof message.role !== 'string') {
      throw invalid(`'messages[${i}]' must be an object with a string 'role'.`);
    }
  }
  if (model !== undefined && typeof model !== 'string') throw invalid("'model' must be a string.");
  if (tools !== undefined && tools !== null && !Array.isArray(tools)) throw invalid("'tools' must be an array.");
  return {
    model: model ?? SCRIPTED_MODEL_NAME,
    messages: messages as ChatMessage[],
    tools: Array.isArray(tools) ? tools : [],
    stream: stream === true,
    includeUsage: isRecord(streamOptions) && streamOptions.include_usage === true,
  };
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new RequestError(413, errorBody('Request body too large.', 'invalid_request_error'));
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function sendJson(res: ServerResponse, status: number, body: object, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) return void res.destroy();
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

function sseHeaders(): Record<string, string> {
  return { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' };
}

/** Writes one SSE event, waiting for drain when the socket's buffer is full. False once the client is gone. */
async function writeEvent(res: ServerResponse, data: string, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return false;
  if (res.write(`data: ${data}\n\n`)) return true;
  try {
    await once(res, 'drain', { signal });
    return true;
  } catch {
    return false;
  }
}

/** Sleeps unless the request ends first; true when the full time passed. The timer is cleared on abort. */
async function wait(ms: number, signal: AbortSignal): Promise<boolean> {
  try {
    await sleep(ms, undefined, { signal });
    return true;
  } catch {
    return false;
  }
}

/** Resolves when the request ends; holds no timer. */
function untilAborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    signal.addEventListener('abort', () => resolve(), { once: true });
  });
}

function modelObject(id: string): object {
  return { id, object: 'model', created: 0, owned_by: 'cadre' };
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

function authorized(header: string | undefined, expected: Buffer): boolean {
  return header !== undefined && timingSafeEqual(digest(header), expected);
}

/** The host as it goes in a URL: wildcard addresses become loopback, IPv6 gets brackets. */
function urlHost(host: string): string {
  if (host === '0.0.0.0' || host === '') return '127.0.0.1';
  if (host === '::') return '[::1]';
  return host.includes(':') ? `[${host}]` : host;
}

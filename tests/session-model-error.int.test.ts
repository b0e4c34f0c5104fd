import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpClient } from '@cadre/testing';
import { TestStack } from './support/stack.ts';
import { sessionEventsWhen } from './support/session-client.ts';

// A model proxy that refuses the key and echoes it, as LiteLLM does in its 401s.
const MODEL_KEY = 'sk-live-do-not-leak-0123456789';
let stack: TestStack;
let proxy: Server;

beforeAll(async () => {
  proxy = createServer((req, res) => {
    const key = (req.headers.authorization ?? '').replace(/^Bearer /, '');
    req.resume();
    res.writeHead(401, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: `Authentication Error, Invalid proxy server token passed. Received API Key = ${key}`, type: 'auth_error', code: '401' } }));
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  stack = await TestStack.start({ workers: 0 });
  await stack.addWorkerPool({}, undefined, { url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/v1`, apiKey: MODEL_KEY });
});
afterAll(async () => {
  await stack?.stop();
  proxy?.close();
});

interface Ev {
  seq: number;
  event_type: string;
  payload: Record<string, any>;
}

describe('a session turn the model refuses', () => {
  it('ends with a session_error that carries the model\'s message with the API key redacted', async () => {
    const api = httpClient(stack.url);
    const created = await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: 'leak' });
    const sessionId = created.body.session.session_id;
    expect((await api.post(`/api/sessions/${sessionId}/messages`, { content: 'Hello' })).status).toBe(202);
    const log = await sessionEventsWhen<Ev>(stack.url, sessionId, (all) => all.some((e) => e.event_type === 'turn_complete'));
    const error = log.find((e) => e.event_type === 'session_error')!;
    expect(error.payload).toMatchObject({ code: 'model_error', message: expect.stringContaining('status 401') });
    expect(error.payload.message).toContain('Received API Key = [redacted]');
    expect(JSON.stringify(log)).not.toContain(MODEL_KEY);
  });
});

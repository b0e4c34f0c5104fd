import { createHash, randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { TEST_API_KEY, grpcClient, httpClient, runsCall, waitUntil, watchTeam } from '@cadre/testing';
import { gatewayConfig } from '../apps/gateway/src/config.ts';
import { startGateway, type Gateway } from '../apps/gateway/src/gateway.ts';
import { TestStack } from './support/stack.ts';

// A key refused on any edge leaves one warn line an operator can read (route, status, reason, client, the key's
// fingerprint, never the key) and counts in cadre_auth_refused_total; a burst cannot flood the log.

const RUNS_KEY = `runs-${randomUUID()}`;
const WS1_KEY = `ws1-${randomUUID()}`;

interface Line {
  msg: string;
  level: number;
  component?: string;
  edge?: string;
  route?: string;
  status?: string;
  reason?: string;
  client?: string;
  credential?: string;
  dropped?: number;
}

let stack: TestStack;
let gateway: Gateway;
let url: string;
const logLines: string[] = [];
const clients: ReturnType<typeof grpcClient>[] = [];

const fingerprint = (key: string): string => createHash('sha256').update(key).digest('hex').slice(0, 8);
const lines = (): Line[] => logLines.map((l) => JSON.parse(l) as Line);
const refusalLines = (): Line[] => lines().filter((l) => l.component === 'auth' && l.dropped === undefined);
const droppedCount = (): number => lines().reduce((n, l) => n + (l.component === 'auth' ? (l.dropped ?? 0) : 0), 0);

/** The refusal lines written while `act` ran (the log is shared by the tests, which run one at a time). */
async function refusalsDuring(act: () => Promise<unknown>): Promise<Line[]> {
  const before = refusalLines().length;
  await act();
  return refusalLines().slice(before);
}

async function refusedTotal(edge: string, reason: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('cadre_auth_refused_total{') && l.includes(`edge="${edge}"`) && l.includes(`reason="${reason}"`));
  return line ? Number(line.split(' ').pop()) : 0;
}

function expectNoKeyIn(secret: string): void {
  expect(logLines.join('')).not.toContain(secret);
}

beforeAll(async () => {
  stack = await TestStack.start({ gateways: 0, workers: 0 });
  const config = gatewayConfig({
    REDIS_URL: stack.redis.url, CADRE_KEY_PREFIX: stack.prefix, PORT: '0', HOST: '127.0.0.1',
    CADRE_API_KEY: TEST_API_KEY, CADRE_API_KEYS: `ws1:${WS1_KEY}`, RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: `control-${randomUUID()}`,
  });
  // Everything at trace, without redaction: the key must never reach the logger at all.
  const logger = pino({ level: 'trace' }, { write: (line: string) => void logLines.push(line) });
  gateway = await startGateway({ ...config, redis: stack.redis.target }, logger);
  url = `http://127.0.0.1:${gateway.port}`;
});
afterAll(async () => {
  for (const client of clients) client.close();
  await gateway?.close();
  await stack?.stop();
});

describe('a refused credential', () => {
  it('over HTTP: one line with the route template, status, reason, client and the key as a fingerprint', async () => {
    const wrong = `wrong-${randomUUID()}`;
    const before = await refusedTotal('http', 'invalid_key');
    const logged = await refusalsDuring(async () => {
      expect((await httpClient(url, wrong).get(`/api/tasks/${randomUUID()}`)).status).toBe(401);
    });
    expect(logged).toEqual([expect.objectContaining({
      level: 40, edge: 'http', route: '/api/tasks/:task_id', status: '401', reason: 'invalid_key', client: '127.0.0.1', credential: `authorization:${fingerprint(wrong)}`,
    })]);
    expectNoKeyIn(wrong);
    expect(await refusedTotal('http', 'invalid_key')).toBe(before + 1);
  });

  it('over HTTP: no key is "none", and a valid key outside its workspace is not_permitted (403)', async () => {
    const logged = await refusalsDuring(async () => {
      expect((await httpClient(url, null).get('/api/tasks?workspace_id=ws1')).status).toBe(401);
      expect((await httpClient(url, WS1_KEY).post('/api/tasks', { workspace_id: 'ws2', goal: 'Weigh two options' })).status).toBe(403);
    });
    expect(logged).toEqual([
      expect.objectContaining({ edge: 'http', route: '/api/tasks', status: '401', reason: 'missing_key', credential: 'none' }),
      expect.objectContaining({ edge: 'http', route: '/api/tasks', status: '403', reason: 'not_permitted', credential: `authorization:${fingerprint(WS1_KEY)}` }),
    ]);
    expectNoKeyIn(WS1_KEY);
  });

  it('on the runs API, stop-all included: the runs headers fingerprinted', async () => {
    const wrong = `wrong-${randomUUID()}`;
    const wrongControl = `control-${randomUUID()}`;
    const logged = await refusalsDuring(async () => {
      expect((await runsCall(url, wrong, 'GET', `/api/runs/${randomUUID()}`)).status).toBe(401);
      expect((await runsCall(url, RUNS_KEY, 'POST', '/api/runs/stop-all', { workspace_id: 'ws1' }, { 'x-windie-runs-control-key': wrongControl })).status).toBe(403);
    });
    expect(logged).toEqual([
      expect.objectContaining({ edge: 'http', route: '/api/runs/:run_id', status: '401', reason: 'invalid_key', client: '127.0.0.1', credential: `x-windie-runs-key:${fingerprint(wrong)}` }),
      expect.objectContaining({
        edge: 'http', route: '/api/runs/stop-all', status: '403', reason: 'not_permitted',
        credential: `x-windie-runs-key:${fingerprint(RUNS_KEY)} x-windie-runs-control-key:${fingerprint(wrongControl)}`,
      }),
    ]);
    for (const key of [wrong, wrongControl, RUNS_KEY]) expectNoKeyIn(key);
  });

  it('over gRPC: one line with the method, the status name and the peer', async () => {
    const wrong = `wrong-${randomUUID()}`;
    const before = await refusedTotal('grpc', 'invalid_key');
    const client = grpcClient(`127.0.0.1:${gateway.port}`);
    clients.push(client);
    const logged = await refusalsDuring(async () => {
      const { status } = await watchTeam(client, { taskId: randomUUID() }, wrong);
      expect(status.code).toBe(16); // UNAUTHENTICATED
    });
    expect(logged).toEqual([expect.objectContaining({
      level: 40, edge: 'grpc', route: 'roz.v1.AgentService/WatchTeam', status: 'UNAUTHENTICATED', reason: 'invalid_key',
      client: expect.stringContaining('127.0.0.1'), credential: `authorization:${fingerprint(wrong)}`,
    })]);
    expectNoKeyIn(wrong);
    expect(await refusedTotal('grpc', 'invalid_key')).toBe(before + 1);
  });

  it('on the /ws handshake: one line when the socket is closed 1008', async () => {
    const wrong = `wrong-${randomUUID()}`;
    const logged = await refusalsDuring(async () => {
      const ws = new WebSocket(`${url.replace('http', 'ws')}/ws`, { headers: { authorization: `Bearer ${wrong}` } });
      const code = await new Promise<number>((resolve) => ws.once('close', (c: number) => resolve(c)));
      expect(code).toBe(1008);
    });
    expect(logged).toEqual([expect.objectContaining({
      edge: 'ws', route: '/ws', status: 'close 1008', reason: 'invalid_key', client: '127.0.0.1', credential: `authorization:${fingerprint(wrong)}`,
    })]);
    expectNoKeyIn(wrong);
  });

  it('a burst of 1,000 refusals writes a bounded number of lines and one count of the rest; the metric counts all', async () => {
    const wrong = `wrong-${randomUUID()}`;
    const before = await refusedTotal('http', 'invalid_key');
    const linesBefore = refusalLines().length;
    const droppedBefore = droppedCount();
    const api = httpClient(url, wrong);
    for (let sent = 0; sent < 1_000; sent += 100) {
      const statuses = await Promise.all(Array.from({ length: 100 }, () => api.get(`/api/tasks/${randomUUID()}`).then((r) => r.status)));
      expect(new Set(statuses)).toEqual(new Set([401]));
    }
    // The count of the unlogged refusals is written when the second they fell in ends.
    await waitUntil('the dropped count', () => refusalLines().length - linesBefore + droppedCount() - droppedBefore === 1_000);
    const written = refusalLines().length - linesBefore;
    expect(droppedCount() - droppedBefore).toBeGreaterThan(0);
    expect(written).toBeLessThanOrEqual(100);
    expectNoKeyIn(wrong);
    expect(await refusedTotal('http', 'invalid_key')).toBe(before + 1_000);
  });
});

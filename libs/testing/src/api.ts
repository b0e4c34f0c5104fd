import * as grpc from '@grpc/grpc-js';
import { AgentServiceClient, type TeamEventProto } from '@cadre/protocol';
import type { TeamEvent } from '@cadre/protocol';
import { TEST_API_KEY } from './index.ts';

export interface ApiResponse<T = Record<string, unknown>> {
  status: number;
  body: T;
}

/** A thin HTTP client over a real connection, for tests. */
export function httpClient(baseUrl: string, key: string | null = TEST_API_KEY) {
  const request = async <T = Record<string, unknown>>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<ApiResponse<T>> => {
    const res = await fetch(`${baseUrl}${path}`, {
      method,
      headers: {
        ...(key ? { authorization: `Bearer ${key}` } : {}),
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...headers,
      },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : {}) as T };
  };
  return {
    request,
    get: <T = Record<string, unknown>>(path: string) => request<T>('GET', path),
    post: <T = Record<string, unknown>>(path: string, body?: unknown, headers?: Record<string, string>) => request<T>('POST', path, body, headers),
  };
}

/** Polls the events endpoint until the task's terminal event; returns every event in order. */
export async function pollUntilTerminal(baseUrl: string, taskId: string, timeoutMs = 20_000): Promise<TeamEvent[]> {
  const api = httpClient(baseUrl);
  const events: TeamEvent[] = [];
  const deadline = Date.now() + timeoutMs;
  const started = Date.now();
  let after = 0;
  // What the gateway answered so far, for the failure message: how it got to an unexpected answer matters.
  let unavailable = 0;
  let lastOkMs: number | undefined;
  while (Date.now() < deadline) {
    const { status, body } = await api.get<{ events: TeamEvent[]; next_after_seq: number }>(`/api/tasks/${taskId}/events?after_seq=${after}&limit=1000`);
    // 503: the store is unavailable for the moment (Redis failing over); a client asks again, as here.
    if (status !== 200 && status !== 503) {
      throw new Error(`events: HTTP ${status} ${JSON.stringify(body)} after ${Date.now() - started} ms of polling `
        + `(${unavailable} answers 503; last 200 ${lastOkMs === undefined ? 'never' : `at ${lastOkMs} ms`}; events so far: ${events.map((e) => e.event_type).join(',')})`);
    }
    if (status === 503) unavailable++;
    if (status === 200) {
      lastOkMs = Date.now() - started;
      events.push(...body.events);
      after = body.next_after_seq;
      if (events.some((e) => e.event_type.startsWith('task_') && e.event_type !== 'task_queued')) return events;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`task ${taskId} did not finish in ${timeoutMs} ms (${unavailable} answers 503); events so far: ${events.map((e) => e.event_type).join(',')}`);
}

/** Waits until the log holds an event matching `pred`. */
export async function waitForEvent(baseUrl: string, taskId: string, pred: (e: TeamEvent) => boolean, timeoutMs = 15_000): Promise<TeamEvent> {
  const api = httpClient(baseUrl);
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const { body } = await api.get<{ events: TeamEvent[] }>(`/api/tasks/${taskId}/events?limit=1000`);
    const hit = body.events?.find(pred);
    if (hit) return hit;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no matching event on task ${taskId} within ${timeoutMs} ms`);
}

export function grpcClient(target: string): AgentServiceClient {
  return new AgentServiceClient(target, grpc.credentials.createInsecure());
}

/** Runs WatchTeam to its end; resolves with the events and the final status. `onEvent` sees each event as it comes. */
export function watchTeam(client: AgentServiceClient, request: { taskId: string; afterSeq?: number }, key: string | null = TEST_API_KEY, onEvent?: (e: TeamEventProto) => void): Promise<{ events: TeamEventProto[]; status: grpc.StatusObject | grpc.ServiceError }> {
  return new Promise((resolve) => {
    const metadata = new grpc.Metadata();
    if (key) metadata.set('authorization', `Bearer ${key}`);
    const events: TeamEventProto[] = [];
    const call = client.watchTeam({ taskId: request.taskId, afterSeq: request.afterSeq ?? 0 }, metadata);
    call.on('data', (e: TeamEventProto) => {
      events.push(e);
      onEvent?.(e);
    });
    call.on('error', (err: grpc.ServiceError) => resolve({ events, status: err }));
    call.on('status', (status: grpc.StatusObject) => {
      if (status.code === grpc.status.OK) resolve({ events, status });
    });
  });
}

export function assertContiguous(seqs: number[], from = 1): void {
  seqs.forEach((seq, i) => {
    if (seq !== from + i) throw new Error(`seq gap or duplicate at index ${i}: expected ${from + i}, got ${seq} (all: ${seqs.join(',')})`);
  });
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read JSON of many shapes
export type RunsResponse = { status: number; body: Record<string, any> };

/**
 * Plain HTTP to the runs API as a client written for the original sends it (`x-windie-runs-key`); a header given
 * as null is left out.
 */
export async function runsCall(baseUrl: string, key: string, method: string, path: string, body?: unknown, headers: Record<string, string | null> = {}): Promise<RunsResponse> {
  const all: Record<string, string | null> = { 'x-windie-runs-key': key, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers };
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers: Object.fromEntries(Object.entries(all).filter((e): e is [string, string] => e[1] !== null)),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : {} };
}

/** WatchTeamRequest bytes by hand: field 1 task_id (string), field 2 after_seq (uint64 varint, any size). */
export function encodeWatchTeamRequest(id: string, afterSeq: bigint): Buffer {
  const varint: number[] = [];
  for (let v = afterSeq; ; ) {
    const byte = Number(v & 0x7fn);
    v >>= 7n;
    if (v === 0n) {
      varint.push(byte);
      break;
    }
    varint.push(byte | 0x80);
  }
  const idBytes = Buffer.from(id);
  return Buffer.concat([Buffer.from([0x0a, idBytes.length]), idBytes, Buffer.from([0x10, ...varint])]);
}

/** WatchTeam with raw request bytes; resolves with the final status (events are counted, not decoded). */
export function rawWatchTeam(client: grpc.Client, request: Buffer, key: string | null = TEST_API_KEY, deadlineMs = 5_000): Promise<{ status: grpc.StatusObject; messages: number }> {
  return new Promise((resolve) => {
    const metadata = new grpc.Metadata();
    if (key) metadata.set('authorization', `Bearer ${key}`);
    const call = client.makeServerStreamRequest('/roz.v1.AgentService/WatchTeam', (b: Buffer) => b, (b: Buffer) => b, request, metadata, { deadline: Date.now() + deadlineMs });
    let messages = 0;
    call.on('data', () => messages++);
    call.on('error', () => undefined);
    call.on('status', (status: grpc.StatusObject) => resolve({ status, messages }));
  });
}

import * as grpc from '@grpc/grpc-js';
import { SessionRequest, type AgentServiceClient, type DeepPartial, type SessionResponse } from '@cadre/protocol';
import { TEST_API_KEY, httpClient, waitUntil } from '@cadre/testing';

type Frame = SessionResponse;
export type FrameCase = NonNullable<Frame['response']>['$case'];

/** A real grpc-js StreamSession call: records every frame, lets a test wait for one and send requests. */
export class SessionStream {
  readonly frames: Frame[] = [];
  readonly status: Promise<grpc.StatusObject>;
  private readonly call: grpc.ClientDuplexStream<SessionRequest, SessionResponse>;
  private waiters = new Set<() => void>();

  /** `headers` go in the call's metadata too (e.g. a W3C `traceparent`). */
  constructor(client: AgentServiceClient, key: string | null = TEST_API_KEY, headers: Record<string, string> = {}) {
    const metadata = new grpc.Metadata();
    if (key) metadata.set('authorization', `Bearer ${key}`);
    for (const [name, value] of Object.entries(headers)) metadata.set(name, value);
    this.call = client.streamSession(metadata);
    this.call.on('data', (frame: Frame) => {
      this.frames.push(frame);
      for (const wake of this.waiters) wake();
    });
    this.status = new Promise((resolve) => {
      this.call.on('error', (err: grpc.ServiceError) => resolve(err));
      this.call.on('status', (status: grpc.StatusObject) => {
        if (status.code === grpc.status.OK) resolve(status);
      });
    });
    void this.status.then(() => {
      for (const wake of this.waiters) wake();
    });
  }

  /** Sends a request; fields left out take their proto defaults (as any protobuf client sends them). */
  send(request: DeepPartial<SessionRequest>['request']): void {
    this.call.write(SessionRequest.fromPartial({ request }));
  }

  end(): void {
    this.call.end();
  }

  cancel(): void {
    this.call.cancel();
  }

  /** Frames of one kind, unwrapped. */
  of<C extends FrameCase>(kind: C): (Extract<NonNullable<Frame['response']>, { $case: C }>['value'] & { seq: number })[] {
    return this.frames.filter((f) => f.response?.$case === kind).map((f) => ({ ...(f.response!.value as object), seq: f.seq }) as never);
  }

  /** Waits for the first frame (from index `from`) matching `pred`. */
  async waitFor(pred: (f: Frame) => boolean, timeoutMs = 15_000, from = 0): Promise<Frame> {
    const deadline = Date.now() + timeoutMs;
    let settled = false;
    void this.status.then(() => (settled = true));
    while (true) {
      const hit = this.frames.slice(from).find(pred);
      if (hit) return hit;
      if (settled) throw new Error(`stream ended without the frame; frames: ${this.describe()}`);
      if (Date.now() > deadline) throw new Error(`no matching frame within ${timeoutMs} ms; frames: ${this.describe()}`);
      await new Promise<void>((resolve) => {
        const wake = (): void => {
          this.waiters.delete(wake);
          clearTimeout(timer);
          resolve();
        };
        const timer = setTimeout(wake, 100);
        this.waiters.add(wake);
      });
    }
  }

  waitForCase(kind: FrameCase, timeoutMs?: number, from?: number): Promise<Frame> {
    return this.waitFor((f) => f.response?.$case === kind, timeoutMs, from);
  }

  describe(): string {
    return this.frames.map((f) => `${f.seq}:${f.response?.$case}`).join(' ');
  }
}

export const isCase = (kind: FrameCase) => (f: Frame): boolean => f.response?.$case === kind;

/** One event of a session's log, as HTTP polling returns it. */
export interface SessionLogEvent {
  seq: number;
  event_type: string;
  payload: Record<string, unknown>;
}

/** A session's whole log (up to 1,000 events) from `GET /api/sessions/:id/events`. */
export async function sessionEvents<E = SessionLogEvent>(baseUrl: string, sessionId: string): Promise<E[]> {
  return (await httpClient(baseUrl).get<{ events: E[] }>(`/api/sessions/${sessionId}/events?limit=1000`)).body.events;
}

/** The session's log once `done` holds for it (polled); the error names the event types seen by then. */
export async function sessionEventsWhen<E extends { event_type: string } = SessionLogEvent>(
  baseUrl: string, sessionId: string, done: (events: E[]) => boolean, timeoutMs = 20_000,
): Promise<E[]> {
  let seen: E[] = [];
  try {
    return await waitUntil(`session ${sessionId}'s log to reach the condition`, async () => {
      seen = await sessionEvents<E>(baseUrl, sessionId);
      return done(seen) && seen;
    }, { timeoutMs });
  } catch (err) {
    throw new Error(`${(err as Error).message}; events: ${seen.map((e) => e.event_type).join(',')}`, { cause: err });
  }
}

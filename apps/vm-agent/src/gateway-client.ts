// The runs API as a VM worker sees it: heartbeat, worker-dispatched, relayed events. Wire types come from the
// store's run contract (type-only: nothing of the store runs here).
import { SpanKind, inSpan, traceHeaders } from '@cadre/observability';
import type { AssignedRun, CallVerdict, ControlCommand, ControlMode, ProposedCall, RunApproval, VmWorker } from '@cadre/protocol';

export type { AssignedRun, ControlCommand, ControlMode };

export interface HeartbeatRequest {
  workspace_id: string;
  worker_id: string;
  vm_id: string;
  user_id?: string;
  session_id: string;
  status: 'ready' | 'running' | 'stopping';
  metadata: Record<string, unknown>;
  /** Commands applied since the last successful heartbeat; unacked ones are redelivered. */
  acked_command_ids: string[];
}

export interface HeartbeatResponse {
  worker: VmWorker;
  assigned_run: AssignedRun | null;
  control_commands: ControlCommand[];
  heartbeat_interval_ms: number;
}

export interface DispatchedRequest {
  worker_id: string;
  user_id?: string;
  turn_ref: string;
  conversation_ref: string;
  lease_id: string;
}

export interface RelayedEvent {
  event_type: string;
  source: string;
  payload: unknown;
}

/**
 * `fenced`: 409/404, the run ended or this worker no longer holds it; `unavailable`: no answer or 5xx, worth
 * retrying; `rejected`: any other 4xx, a bug or a configuration problem (retrying will not help).
 */
export type GatewayErrorCode = 'fenced' | 'unavailable' | 'rejected';

export class GatewayError extends Error {
  override name = 'GatewayError';
  readonly code: GatewayErrorCode;
  readonly status: number | null;

  constructor(code: GatewayErrorCode, status: number | null, message: string) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

export const isFenced = (err: unknown): boolean => err instanceof GatewayError && err.code === 'fenced';
export const isUnavailable = (err: unknown): boolean => err instanceof GatewayError && err.code === 'unavailable';

export interface GatewayClientOptions {
  baseUrl: string;
  runsKey: string;
  /** Per request, until the whole answer arrived. */
  requestTimeoutMs?: number;
  /** Each call's operation (`heartbeat`, `dispatch`, `relay`), outcome and duration, for metrics. */
  onCall?(call: { operation: string; outcome: 'ok' | GatewayErrorCode; seconds: number }): void;
}

export class GatewayClient {
  private readonly baseUrl: string;
  private readonly runsKey: string;
  private readonly timeoutMs: number;
  private readonly onCall: GatewayClientOptions['onCall'];

  constructor(opts: GatewayClientOptions) {
    this.onCall = opts.onCall;
    this.baseUrl = opts.baseUrl.replace(/\/+$/, '');
    this.runsKey = opts.runsKey;
    this.timeoutMs = opts.requestTimeoutMs ?? 10_000;
  }

  heartbeat(body: HeartbeatRequest, signal?: AbortSignal): Promise<HeartbeatResponse> {
    return this.post<HeartbeatResponse>('heartbeat', '/api/runs/workers/heartbeat', body, signal);
  }

  async dispatched(runId: string, body: DispatchedRequest): Promise<void> {
    await this.post('dispatch', `/api/runs/${encodeURIComponent(runId)}/worker-dispatched`, body, undefined, runId);
  }

  /** Appends events to the run's log in order; the batch's last event may end the run. */
  async relay(runId: string, workerId: string, leaseId: string, events: RelayedEvent[], batchId: string): Promise<void> {
    await this.post('relay', `/api/runs/${encodeURIComponent(runId)}/events`, { events, worker_id: workerId, lease_id: leaseId, batch_id: batchId }, undefined, runId);
  }

  /** Asks about a turn's tool calls before they run (Cadre's approvals for VM runs); a verdict per call, in order. */
  async proposeCalls(runId: string, workerId: string, leaseId: string, calls: ProposedCall[]): Promise<CallVerdict[]> {
    const out = await this.post<{ verdicts: CallVerdict[] }>('propose', `/api/runs/${encodeURIComponent(runId)}/approvals`, { worker_id: workerId, lease_id: leaseId, calls }, undefined, runId);
    return out.verdicts;
  }

  /** One of the run's approvals as it stands (pending, approved, denied, expired, cancelled). */
  async approval(runId: string, approvalId: string, signal?: AbortSignal): Promise<RunApproval> {
    const out = await this.post<{ approval: RunApproval }>('approval', `/api/runs/${encodeURIComponent(runId)}/approvals/${encodeURIComponent(approvalId)}`, undefined, signal, runId);
    return out.approval;
  }

  /** Each call is a CLIENT span (`heartbeat`, `dispatch`, `relay`) whose context travels as `traceparent`. */
  private post<T>(operation: string, path: string, body: unknown, signal?: AbortSignal, runId?: string): Promise<T> {
    const method = body === undefined ? 'GET' : 'POST';
    return inSpan(operation, { kind: SpanKind.CLIENT, attributes: { 'http.request.method': method, ...(runId && { run_id: runId }) } }, async () => {
      const t0 = performance.now();
      try {
        const out = await this.send<T>(path, body, signal);
        this.onCall?.({ operation, outcome: 'ok', seconds: (performance.now() - t0) / 1000 });
        return out;
      } catch (err) {
        this.onCall?.({ operation, outcome: err instanceof GatewayError ? err.code : 'unavailable', seconds: (performance.now() - t0) / 1000 });
        throw err;
      }
    });
  }

  private async send<T>(path: string, body: unknown, signal?: AbortSignal): Promise<T> {
    const method = body === undefined ? 'GET' : 'POST';
    const timeout = AbortSignal.timeout(this.timeoutMs);
    let res: Response;
    let text: string;
    try {
      res = await fetch(`${this.baseUrl}${path}`, {
        method,
        headers: { ...(body !== undefined && { 'content-type': 'application/json' }), 'x-windie-runs-key': this.runsKey, ...traceHeaders() },
        ...(body !== undefined && { body: JSON.stringify(body) }),
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      text = await res.text();
    } catch (err) {
      if (signal?.aborted) throw err;
      const cause = (err as { cause?: { code?: string } }).cause?.code;
      throw new GatewayError('unavailable', null, `${method} ${path}: ${timeout.aborted ? `no answer within ${this.timeoutMs} ms` : (cause ?? (err as Error).message)}`);
    }
    if (res.ok) return (text ? JSON.parse(text) : {}) as T;
    const detail = detailOf(text);
    const message = `${method} ${path}: HTTP ${res.status}${detail ? ` ${detail}` : ''}`;
    if (res.status === 409 || res.status === 404) throw new GatewayError('fenced', res.status, message);
    if (res.status >= 500 || res.status === 429 || res.status === 408) throw new GatewayError('unavailable', res.status, message);
    throw new GatewayError('rejected', res.status, message);
  }
}

function detailOf(text: string): string {
  try {
    const body = JSON.parse(text) as { detail?: unknown };
    return typeof body.detail === 'string' ? body.detail.slice(0, 300) : '';
  } catch {
    return text.slice(0, 300);
  }
}

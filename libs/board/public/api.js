import { keys } from './session.js';

/** An API answer that was not 2xx: `status` and the server's `{error: {code, message}}` (or runs' `detail`). */
export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message ?? body?.detail ?? `HTTP ${status}`);
    this.status = status;
    this.code = body?.error?.code ?? null;
  }
}

async function call(method, path, body, headers) {
  const res = await fetch(path, {
    method,
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!res.ok) throw new ApiError(res.status, parsed);
  return parsed;
}

export const taskHeaders = () => ({ authorization: `Bearer ${keys()?.apiKey ?? ''}` });
const runsHeaders = () => ({ 'x-windie-runs-key': keys()?.runsKey ?? '' });

export const tasksApi = {
  list: (ws, { status, cursor, limit = 50 } = {}) =>
    call('GET', `/api/tasks?${new URLSearchParams({ workspace_id: ws, limit: String(limit), ...(status ? { status } : {}), ...(cursor ? { cursor } : {}) })}`, undefined, taskHeaders()),
  get: async (id) => (await call('GET', `/api/tasks/${encodeURIComponent(id)}`, undefined, taskHeaders())).task,
  create: async (body) => (await call('POST', '/api/tasks', body, taskHeaders())).task,
  cancel: async (id) => (await call('POST', `/api/tasks/${encodeURIComponent(id)}/cancel`, { reason: 'cancelled from the board' }, taskHeaders())).task,
};

// The runs API answers `{run}` today; newer gateways may answer the run itself or `{run, latest_event}`.
const runOf = (body) => (body && typeof body === 'object' && body.run ? body.run : body);

export const runsApi = {
  list: async (ws) => (await call('GET', `/api/runs?${new URLSearchParams({ workspace_id: ws })}`, undefined, runsHeaders())).runs ?? [],
  get: async (id) => runOf(await call('GET', `/api/runs/${encodeURIComponent(id)}`, undefined, runsHeaders())),
  control: async (id, action, controlMode) =>
    runOf(await call('POST', `/api/runs/${encodeURIComponent(id)}/control`, { action, requested_by: 'board', ...(controlMode ? { control_mode: controlMode } : {}) }, runsHeaders())),
  // Stop-all is guarded by the control key (older gateways also wanted the runs key: both are sent).
  stopAll: (ws) =>
    call('POST', '/api/runs/stop-all', { workspace_id: ws, requested_by: 'board' }, { ...runsHeaders(), 'x-windie-runs-control-key': keys()?.controlKey ?? '' }),
};

export const approvalsApi = {
  /** The pending ones (of the workspace's tasks, or of `{session_id}`); null when this gateway has no approvals API. */
  list: async (ws, filter = {}) => {
    try {
      return await call('GET', `/api/approvals?${new URLSearchParams({ workspace_id: ws, status: 'pending', limit: '200', ...filter })}`, undefined, taskHeaders());
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) return null;
      throw err;
    }
  },
  /**
   * One decision for several approvals in one call (POST /api/approvals/decisions):
   * `{decided: [records], failed: [{approval_id, message}]}`. One that another operator decided first or that is
   * gone is reported in `failed`; the others are still decided.
   */
  decideMany: async (approvalIds, approved, reason) => {
    const { results } = await call('POST', '/api/approvals/decisions', { ids: approvalIds, approved, ...(reason ? { reason } : {}) }, taskHeaders());
    return {
      decided: results.filter((r) => r.outcome === 'decided').map((r) => r.approval),
      failed: results.filter((r) => r.outcome !== 'decided').map((r) => ({ approval_id: r.approval_id, message: r.error ?? r.outcome })),
    };
  },
};

export const sessionsApi = {
  create: async (body) => (await call('POST', '/api/sessions', body, taskHeaders())).session,
  get: async (id) => (await call('GET', `/api/sessions/${encodeURIComponent(id)}`, undefined, taskHeaders())).session,
  send: (id, content) => call('POST', `/api/sessions/${encodeURIComponent(id)}/messages`, { content }, taskHeaders()),
  cancel: (id) => call('POST', `/api/sessions/${encodeURIComponent(id)}/cancel`, { reason: 'cancelled from the board' }, taskHeaders()),
  close: async (id) => (await call('DELETE', `/api/sessions/${encodeURIComponent(id)}`, { reason: 'closed from the board' }, taskHeaders())).session,
};

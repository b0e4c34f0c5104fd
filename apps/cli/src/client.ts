import type { CliConfig } from './config.ts';

/** An API answer that was not 2xx, with the server's message (`{error: {message}}`, or the runs API's `detail`). */
export class ApiError extends Error {
  readonly status: number;
  constructor(status: number, body: unknown) {
    const b = body as { error?: { message?: string }; detail?: unknown } | null;
    const detail = typeof b?.detail === 'string' ? b.detail : b?.detail ? JSON.stringify(b.detail) : undefined;
    super(b?.error?.message ?? detail ?? `HTTP ${status}`);
    this.name = 'ApiError';
    this.status = status;
  }
}

export class MissingKeyError extends Error {}

// Loose JSON: the CLI prints what the gateway answers and reads only the fields it shows.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Json = any;

/** The public HTTP APIs, as any client would call them: tasks with the bearer key, runs with the runs keys. */
export class CadreClient {
  readonly config: CliConfig;

  constructor(config: CliConfig) {
    this.config = config;
  }

  taskHeaders(): Record<string, string> {
    if (!this.config.apiKey) throw new MissingKeyError('no API key: set CADRE_API_KEY (or run `npm start`, which writes .cadre/dev-api-key)');
    return { authorization: `Bearer ${this.config.apiKey}` };
  }

  private runsHeaders(): Record<string, string> {
    if (!this.config.runsKey) throw new MissingKeyError('no runs key: set CADRE_RUNS_KEY (or run `npm start`, which writes .cadre/dev-runs-key)');
    return { 'x-windie-runs-key': this.config.runsKey };
  }

  async call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Json> {
    const res = await fetch(`${this.config.url}${path}`, {
      method,
      headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let parsed: Json;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      parsed = { detail: text.slice(0, 200) };
    }
    if (!res.ok) throw new ApiError(res.status, parsed);
    return parsed;
  }

  tasks = {
    create: async (body: Json): Promise<Json> => (await this.call('POST', '/api/tasks', body, this.taskHeaders())).task,
    list: (q: Record<string, string>): Promise<Json> => this.call('GET', `/api/tasks?${new URLSearchParams(q)}`, undefined, this.taskHeaders()),
    get: async (id: string): Promise<Json> => (await this.call('GET', `/api/tasks/${encodeURIComponent(id)}`, undefined, this.taskHeaders())).task,
    cancel: async (id: string, reason: string): Promise<Json> => (await this.call('POST', `/api/tasks/${encodeURIComponent(id)}/cancel`, { reason }, this.taskHeaders())).task,
  };

  /** GET /api/workspaces (a key valid for every workspace): the workspaces that have had tasks, runs or approvals. */
  workspaces = async (): Promise<string[]> => (await this.call('GET', '/api/workspaces', undefined, this.taskHeaders())).workspaces;

  approvals = {
    list: (q: Record<string, string>): Promise<Json> => this.call('GET', `/api/approvals?${new URLSearchParams(q)}`, undefined, this.taskHeaders()),
    /** POST /api/approvals/decisions (`{ids}` or `{filter}` with the decision): one outcome per approval. */
    decideMany: async (body: Json): Promise<Json[]> => (await this.call('POST', '/api/approvals/decisions', body, this.taskHeaders())).results,
  };

  // Older gateways wrap a run as {run}; newer ones answer the run itself, or {run, latest_event} for writes.
  runs = {
    list: async (q: Record<string, string>): Promise<Json[]> => (await this.call('GET', `/api/runs?${new URLSearchParams(q)}`, undefined, this.runsHeaders())).runs ?? [],
    get: async (id: string): Promise<Json> => runOf(await this.call('GET', `/api/runs/${encodeURIComponent(id)}`, undefined, this.runsHeaders())),
    control: async (id: string, action: string, controlMode?: string): Promise<Json> =>
      runOf(await this.call('POST', `/api/runs/${encodeURIComponent(id)}/control`, { action, requested_by: 'cadre-cli', ...(controlMode ? { control_mode: controlMode } : {}) }, this.runsHeaders())),
    stopAll: (workspaceId: string | undefined): Promise<Json> => {
      if (!this.config.controlKey) throw new MissingKeyError('no control key: set CADRE_RUNS_CONTROL_KEY (or run `npm start`, which writes .cadre/dev-runs-control-key)');
      const headers = { 'x-windie-runs-control-key': this.config.controlKey, ...(this.config.runsKey ? { 'x-windie-runs-key': this.config.runsKey } : {}) };
      return this.call('POST', '/api/runs/stop-all', { ...(workspaceId ? { workspace_id: workspaceId } : {}), requested_by: 'cadre-cli' }, headers);
    },
  };
}

const runOf = (body: Json): Json => (body && typeof body === 'object' && body.run ? body.run : body);

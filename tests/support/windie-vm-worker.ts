// A VM worker that speaks to the runs API exactly as WindieOS's does (src/main/app/vm_worker_runtime.cjs in
// buiilding/Windie), written from reading it: the same request bodies, the same order of calls within a
// heartbeat, relays sent one request per event without waiting, the dispatch ack only after the query went out,
// and a failed POST that throws out of the rest of the tick. Nothing Cadre-specific is sent (no acks, no lease,
// no worker id on relays).
//
// What the worker's own agent backend does is played by `WindieBackend`: the test decides which messages it
// emits for a query and when, through the same hooks the original takes (sendAutomatedQuery, the message
// observer, stopQuery). `fetchFn` is the original's injection point for HTTP; tests use it to hold a request
// back and so fix the order in which racing requests reach the gateway.

export interface BackendMessage {
  type: string;
  conversation_ref: string;
  payload?: Record<string, unknown>;
  turn_ref?: string;
  session_id?: string;
  user_id?: string;
}

export interface QueryResult {
  ok: boolean;
  queryMessageId?: string;
  error?: string;
}

/** The worker's agent backend, scripted per query by the test. */
export class WindieBackend {
  private observer: ((data: BackendMessage) => void) | null = null;
  readonly stopped: string[] = [];
  readonly queries: { text: string; conversationRef: string; attachmentContext: string | null }[] = [];
  /** What a query does: emit messages (synchronously or later) and answer as sendAutomatedQuery does. */
  onQuery: (query: { text: string; conversationRef: string }) => Promise<QueryResult> = async () => ({ ok: true, queryMessageId: 'turn-1' });

  register(observer: (data: BackendMessage) => void): () => void {
    this.observer = observer;
    return () => {
      this.observer = null;
    };
  }

  emit(message: BackendMessage): void {
    this.observer?.(message);
  }

  async sendAutomatedQuery(query: { text: string; conversationRef: string; attachmentContext: string | null }): Promise<QueryResult> {
    this.queries.push(query);
    return this.onQuery(query);
  }

  stopQuery(args: { conversation_ref: string }): void {
    this.stopped.push(args.conversation_ref);
  }
}

export interface WindieWorkerOptions {
  backendHttpUrl: string;
  runsKey: string;
  workspaceId: string;
  userId: string;
  sessionId?: string;
  /** AGENT_VM_WORKER_ID; the original falls back to `worker-<userId>`. */
  workerId?: string;
  /** AGENT_VM_AGENT_ID; unset is sent as null, as the original does. */
  agentId?: string;
  backend: WindieBackend;
  fetchFn?: typeof fetch;
}

/** What the original logs with `warn`: every failed heartbeat tick and every failed relay. */
export interface WorkerWarning {
  what: 'tick' | 'relay';
  message: string;
}

export class WindieVmWorker {
  readonly warnings: WorkerWarning[] = [];
  /** Every request the worker sent, in the order it sent them (path and body). */
  readonly sent: { path: string; body: Record<string, unknown> }[] = [];
  private readonly opts: WindieWorkerOptions;
  private readonly fetchFn: typeof fetch;
  private readonly conversationToRun = new Map<string, string>();
  private readonly runToConversation = new Map<string, string>();
  private readonly relays = new Set<Promise<void>>();
  private inTick = false;
  private removeObserver: (() => void) | null = null;

  constructor(opts: WindieWorkerOptions) {
    this.opts = opts;
    this.fetchFn = opts.fetchFn ?? fetch;
  }

  get workerId(): string {
    return this.opts.workerId ?? `worker-${this.opts.userId}`;
  }

  get activeRuns(): number {
    return this.runToConversation.size;
  }

  start(): void {
    // The original relays every backend message without awaiting it (`void onBackendMessage(data)`).
    this.removeObserver = this.opts.backend.register((data) => {
      const relay = this.onBackendMessage(data);
      this.relays.add(relay);
      void relay.finally(() => this.relays.delete(relay));
    });
  }

  stop(): void {
    this.removeObserver?.();
    this.conversationToRun.clear();
    this.runToConversation.clear();
  }

  /** Waits for the relays in flight (a test's way to know the races it started are over). */
  async settled(): Promise<void> {
    while (this.relays.size > 0) await Promise.allSettled([...this.relays]);
  }

  /** One heartbeat tick, as the original's: heartbeat, then its stop commands, then its assignment. */
  async tick(): Promise<void> {
    if (this.inTick) return;
    this.inTick = true;
    try {
      const workerId = this.workerId;
      const response = await this.post('/api/runs/workers/heartbeat', {
        workspace_id: this.opts.workspaceId,
        worker_id: workerId,
        vm_id: `vm-${workerId}`,
        user_id: this.opts.userId,
        session_id: this.opts.sessionId ?? this.opts.userId,
        agent_id: this.opts.agentId ?? null,
        status: this.runToConversation.size > 0 ? 'running' : 'ready',
        metadata: { platform: process.platform },
      });
      await this.applyControlCommands(response.control_commands);
      if (response.assigned_run) await this.dispatchAssignedRun(workerId, response.assigned_run as Record<string, unknown>);
    } catch (err) {
      this.warnings.push({ what: 'tick', message: (err as Error).message });
    } finally {
      this.inTick = false;
    }
  }

  private async applyControlCommands(commands: unknown): Promise<void> {
    if (!Array.isArray(commands)) return;
    for (const command of commands as Record<string, unknown>[]) {
      // The original acts on stop only, and only for a run it executes.
      if (command.action !== 'stop' || typeof command.run_id !== 'string') continue;
      const conversationRef = this.runToConversation.get(command.run_id);
      if (!conversationRef) continue;
      this.opts.backend.stopQuery({ conversation_ref: conversationRef });
      await this.post(`/api/runs/${command.run_id}/events`, {
        event_type: 'run-control-applied',
        source: 'worker',
        payload: { action: 'stop', command_id: command.command_id || null, conversation_ref: conversationRef },
      });
    }
  }

  private async dispatchAssignedRun(workerId: string, assigned: Record<string, unknown>): Promise<void> {
    const runId = assigned.run_id as string;
    const conversationRef = assigned.conversation_ref as string;
    const query = assigned.query as string;
    if (!runId || !conversationRef || !query) return;
    if (this.runToConversation.has(runId) || this.conversationToRun.has(conversationRef)) return;
    this.conversationToRun.set(conversationRef, runId);
    this.runToConversation.set(runId, conversationRef);
    const files = Array.isArray(assigned.files) ? (assigned.files as { artifact_id: string }[]) : [];
    const attachmentContext = files.length > 0 ? `Run input artifacts:\n${files.map((f, i) => `${i + 1}. artifact_id=${f.artifact_id}`).join('\n')}` : null;
    let result: QueryResult;
    try {
      result = await this.opts.backend.sendAutomatedQuery({ text: query, conversationRef, attachmentContext });
    } catch (err) {
      this.clear(runId, conversationRef);
      throw err;
    }
    if (!result.ok) {
      this.clear(runId, conversationRef);
      await this.post(`/api/runs/${runId}/events`, { event_type: 'error', source: 'worker', payload: { message: result.error || 'Failed to dispatch VM run query' } });
      return;
    }
    await this.post(`/api/runs/${runId}/worker-dispatched`, { worker_id: workerId, user_id: this.opts.userId, turn_ref: result.queryMessageId, conversation_ref: conversationRef });
  }

  private async onBackendMessage(data: BackendMessage): Promise<void> {
    const runId = this.conversationToRun.get(data.conversation_ref);
    if (!data.type || !runId) return;
    try {
      await this.post(`/api/runs/${runId}/events`, {
        event_type: data.type,
        source: 'worker-stream',
        payload: {
          payload: data.payload || {},
          conversation_ref: data.conversation_ref || null,
          turn_ref: data.turn_ref || null,
          session_id: data.session_id || null,
          user_id: data.user_id || null,
        },
      });
      if (data.type === 'streaming-complete' || data.type === 'error') this.clear(runId, data.conversation_ref);
    } catch (err) {
      this.warnings.push({ what: 'relay', message: (err as Error).message });
    }
  }

  private clear(runId: string, conversationRef: string): void {
    this.runToConversation.delete(runId);
    this.conversationToRun.delete(conversationRef);
  }

  /** The original's postJson: a non-2xx answer throws with its status and text. */
  private async post(path: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
    this.sent.push({ path, body });
    const url = `${this.opts.backendHttpUrl}${path}`;
    const res = await this.fetchFn(url, { method: 'POST', headers: { 'Content-Type': 'application/json', 'x-windie-runs-key': this.opts.runsKey }, body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`HTTP ${res.status} for ${url}: ${await res.text().catch(() => '')}`);
    return (await res.json()) as Record<string, unknown>;
  }
}

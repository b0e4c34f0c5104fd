import type { Logger } from '@cadre/observability';
import { isUuid, TERMINAL_RUN_STATUSES, type ControlAction, type CreateRunBody, type DispatchedBody, type HeartbeatBody, type RelayBody, type RunEvent, type RunRecord } from '@cadre/protocol';
import { StoreError, type EventFanout, type LogWatcher, type RunStore, type RunWithEvent, type HeartbeatResult } from '@cadre/store';
import { canAccess, type Principal } from '../auth.ts';
import { ApiError } from '../errors.ts';
import type { TaskService } from '../tasks/task-service.ts';

export interface RunServiceDeps {
  store: RunStore;
  fanout: EventFanout;
  tasks: TaskService;
  logger: Logger;
  maxActivePerWorkspace: number;
  heartbeatIntervalMs: number;
}

/** The runs control plane behind the HTTP routes. */
export class RunService {
  private readonly deps: RunServiceDeps;

  constructor(deps: RunServiceDeps) {
    this.deps = deps;
  }

  async create(body: CreateRunBody, idempotencyKey?: string): Promise<{ run: RunRecord; events: RunEvent[]; created: boolean }> {
    const files = (body.files ?? []).map((f) => ({ artifact_id: f.artifact_id, filename: f.filename || null, content_type: f.content_type || null }));
    try {
      const out = await this.deps.store.createRun(
        { workspace_id: body.workspace_id, agent_id: body.agent_id ?? null, query: body.query, requested_by: body.requested_by ?? null, files, metadata: body.metadata ?? {} },
        this.deps.maxActivePerWorkspace,
        idempotencyKey,
      );
      if (out.created) this.deps.logger.info({ runId: out.run.run_id, workspaceId: body.workspace_id }, 'run created');
      return out;
    } catch (err) {
      if (err instanceof StoreError && err.code === 'run_cap_reached') {
        // The original's words.
        throw new ApiError('conflict', `Active run limit reached for workspace '${body.workspace_id}' (${this.deps.maxActivePerWorkspace}).`);
      }
      throw err;
    }
  }

  /** A run outside the key's reach is answered as an unknown one: its existence is not revealed. */
  async get(principal: Principal, runId: string): Promise<RunRecord> {
    checkRunId(runId);
    const run = await this.deps.store.getRun(runId);
    if (!run || !canAccess(principal, run.workspace_id)) throw runNotFound();
    return run;
  }

  /** Before a run is read or written: unknown, or outside the key's reach, is 404 (the workspace is cached). */
  private async visible(principal: Principal, runId: string): Promise<void> {
    checkRunId(runId);
    if (principal.workspaces === 'all') return;
    if ((await this.deps.store.workspaceOf(runId)) !== principal.workspaces) throw runNotFound();
  }

  async events(principal: Principal, runId: string, afterSeq: number, limit: number): Promise<{ run_id: string; events: RunEvent[]; next_after_seq: number }> {
    await this.visible(principal, runId);
    const page = await this.deps.store.readEvents(runId, afterSeq, limit);
    if (!page) throw runNotFound();
    return { run_id: runId, events: page.events, next_after_seq: page.events.at(-1)?.seq ?? afterSeq };
  }

  async heartbeat(body: HeartbeatBody): Promise<HeartbeatResult & { heartbeat_interval_ms: number }> {
    const result = await this.deps.store.heartbeat(
      {
        workspace_id: body.workspace_id,
        worker_id: body.worker_id,
        vm_id: body.vm_id,
        user_id: body.user_id,
        session_id: body.session_id,
        agent_id: body.agent_id,
        status: body.status,
        metadata: body.metadata ?? {},
      },
      body.acked_command_ids,
    );
    return { ...result, heartbeat_interval_ms: this.deps.heartbeatIntervalMs };
  }

  async control(principal: Principal, runId: string, action: ControlAction, controlMode: string | undefined, requestedBy: string): Promise<RunWithEvent> {
    // The original validates the body before it looks the run up.
    if (action === 'set-control-mode' && !controlMode) throw new ApiError('unprocessable', 'control_mode is required when action is set-control-mode');
    await this.visible(principal, runId);
    try {
      return await this.deps.store.control(runId, action, controlMode, requestedBy);
    } catch (err) {
      if (err instanceof StoreError && (err.code === 'invalid_state' || err.code === 'run_finished')) {
        const run = await this.deps.store.getRun(runId);
        throw new ApiError('conflict', `cannot ${action} a run that is ${run?.status ?? 'gone'}`);
      }
      throw err;
    }
  }

  async dispatched(principal: Principal, runId: string, body: DispatchedBody): Promise<RunWithEvent> {
    await this.visible(principal, runId);
    const payload = { user_id: body.user_id ?? null, turn_ref: body.turn_ref ?? null, conversation_ref: body.conversation_ref ?? null };
    try {
      return await this.deps.store.dispatch(runId, body.worker_id, body.lease_id, payload);
    } catch (err) {
      // The original answers a dispatch by anyone but the holder as it answers an unknown run.
      if (err instanceof StoreError && (err.code === 'worker_mismatch' || err.code === 'run_not_found')) throw new ApiError('not_found', 'Run not found or worker mismatch');
      throw err;
    }
  }

  async relay(principal: Principal, runId: string, body: RelayBody): Promise<RunWithEvent & { last_seq: number }> {
    await this.visible(principal, runId);
    const events = body.events ?? (body.event_type ? [{ event_type: body.event_type, source: body.source, payload: body.payload }] : []);
    if (events.length === 0) throw new ApiError('unprocessable', 'send event_type (one event) or events (a batch)');
    if (body.events && body.event_type) throw new ApiError('unprocessable', 'send either event_type or events, not both');
    return this.deps.store.relay(runId, body.worker_id, body.lease_id, events, body.batch_id);
  }

  /** Stops every active run in scope and cancels every unfinished team task in scope, through task cancel. */
  async stopAll(workspaceId: string | undefined, requestedBy: string | undefined): Promise<{ workspace_id: string | null; stopped_run_ids: string[]; count: number; stopped_task_ids: string[] }> {
    const [stoppedRuns, stoppedTasks] = await Promise.all([this.deps.store.stopAll(workspaceId, requestedBy ?? ''), this.cancelTasks(workspaceId, requestedBy ?? '')]);
    this.deps.logger.warn({ workspaceId: workspaceId ?? '*', runs: stoppedRuns.length, tasks: stoppedTasks.length, requestedBy }, 'stop-all');
    return { workspace_id: workspaceId ?? null, stopped_run_ids: stoppedRuns, count: stoppedRuns.length, stopped_task_ids: stoppedTasks };
  }

  private async cancelTasks(workspaceId: string | undefined, requestedBy: string): Promise<string[]> {
    const workspaces = workspaceId ? [workspaceId] : await this.deps.store.workspaceIds();
    const cancelled: string[] = [];
    await Promise.all(
      workspaces.map(async (ws) => {
        for (const taskId of await this.deps.tasks.activeTaskIds(ws)) {
          if (await this.deps.tasks.cancelForOperator(taskId, `stop-all by ${requestedBy || 'operator'}`)) cancelled.push(taskId);
        }
      }),
    );
    return cancelled.sort();
  }

  async watch(principal: Principal, runId: string, afterSeq: number): Promise<LogWatcher<RunEvent> | null> {
    const run = await this.get(principal, runId);
    if (afterSeq > run.last_event_seq) throw new ApiError('out_of_range', `after_seq ${afterSeq} is ahead of run ${runId}'s log (last seq ${run.last_event_seq})`);
    const log = this.deps.store.runLog(runId, run.workspace_id);
    if (TERMINAL_RUN_STATUSES.includes(run.status)) {
      if (afterSeq === run.last_event_seq) return null;
      // A run that ended may still get late events after its ending one (its worker's acknowledgement of a stop,
      // chunks that were on their way): replay the log as it stands and close at its last event. Its own tail id,
      // so no live tail of the run (which ends at the ending event) is shared.
      const endAt = run.last_event_seq;
      return this.deps.fanout.watch({ ...log, id: `${log.id}@${endAt}`, isTerminal: (e) => e.seq >= endAt }, afterSeq);
    }
    return this.deps.fanout.watch(log, afterSeq);
  }

  list(workspaceId: string, status?: RunRecord['status']): Promise<RunRecord[]> {
    return this.deps.store.listRuns(workspaceId, status);
  }
}

const runNotFound = (): ApiError => new ApiError('not_found', 'Run not found');

/** Run ids are lowercase UUIDs; any other form names no run (404, as the original), without a Redis read. */
function checkRunId(runId: string): void {
  if (!isUuid(runId) || runId !== runId.toLowerCase()) throw runNotFound();
}

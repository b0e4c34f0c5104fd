import { DelayedError, UnrecoverableError, WaitingChildrenError, WaitingError, type Job } from 'bullmq';
import type OpenAI from 'openai';
import { resolveTools, runAgent, type AgentHooks, type AgentObserver, type AgentOutcome, type AgentSnapshot, type AgentTool, type RunAgentOptions, type ToolGate, type ToolVerdict } from '@cadre/agent';
import { annotateSpan, type Logger } from '@cadre/observability';
import type { TokenUsage, WorkerPhaseName } from '@cadre/protocol';
import {
  LEAD_WORKER_ID,
  StoreError,
  evaluatePolicy,
  isRedisUnavailable,
  newApprovalId,
  type ApprovalRecord,
  type ApprovalRule,
  type ApprovalStore,
  type AgentJobData,
  type ClaimResult,
  type TaskContext,
  type TaskStore,
  type TeamQueue,
  type WorkerRecord,
  type WorkerView,
  unfinishedWorkerIds,
} from '@cadre/store';
import type { AbortCause, CancelRegistry } from '../cancel-registry.ts';
import { SHUTDOWN_HAND_BACK_MS, handJobBack, rideOutOutage, type HandBackReason } from './hand-back.ts';
import { spawnWorkerTool } from './spawn-worker.tool.ts';

export interface AgentJobDeps {
  store: TaskStore;
  approvals: ApprovalStore;
  queue: TeamQueue;
  cancels: CancelRegistry;
  model: OpenAI;
  defaultModel: string;
  hostId: string;
  maxTurns: number;
  workerTimeoutMs: number;
  /** How many times a job may be handed back because Redis could not take its writes before it fails. */
  maxAttempts: number;
  /**
   * How long an attempt whose write found Redis unavailable waits for it to answer again, to hand its job back: the
   * job's lock duration, past which its lease has expired anyway and the stall check retakes the job.
   */
  redisWaitMs: number;
  logger: Logger;
  onFinished?(outcome: 'completed' | 'failed', durationMs: number): void;
  /** The lead recorded the task's end; `seconds` since the lead's job was enqueued (the task's creation). */
  onTaskFinished?(status: 'completed' | 'failed', seconds: number): void;
  /** Metrics of the agent loops. */
  observer?: AgentObserver;
  /** Hears of each job back in the queue, once its moveToWait succeeded: the drain deadline passed, or a write found Redis unavailable. */
  onHandedBack?: (reason: HandBackReason) => void;
}

export interface AgentJobResult {
  workerId: string;
  status: 'completed' | 'failed' | 'skipped';
  result?: string;
}

const ZERO: TokenUsage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
const addUsage = (a: TokenUsage, b: TokenUsage | null | undefined): TokenUsage => ({
  prompt_tokens: a.prompt_tokens + (b?.prompt_tokens ?? 0),
  completion_tokens: a.completion_tokens + (b?.completion_tokens ?? 0),
  total_tokens: a.total_tokens + (b?.total_tokens ?? 0),
});

/**
 * Runs one agent job: a worker of a team, or its lead (plan, then synthesize). The job's BullMQ lock token is the
 * attempt's lease in the task roster: every event this attempt appends is fenced by it, so a process that lost
 * its lock cannot write for the job any more.
 */
export class AgentJobProcessor {
  private readonly deps: AgentJobDeps;
  /** Running jobs by BullMQ job id, so a lost lock or a shutdown can abort the right loop. */
  private readonly running = new Map<string, AbortController>();

  constructor(deps: AgentJobDeps) {
    this.deps = deps;
  }

  abortJob(jobId: string, cause: AbortCause): void {
    this.running.get(jobId)?.abort(cause);
  }

  /** Aborts every running loop. */
  abortAll(cause: AbortCause): void {
    for (const ac of this.running.values()) ac.abort(cause);
  }

  readonly process = async (job: Job<AgentJobData>, token?: string): Promise<AgentJobResult> => {
    if (!token) throw new Error('agent jobs need a lock token');
    const { taskId, workerId } = job.data;
    // The attempt's span (BullMQ's consumer span, when tracing is on) says which task and agent it ran.
    annotateSpan({ task_id: taskId, worker_id: workerId, ...(job.data.step && { 'cadre.lead_step': job.data.step }) });
    const log = this.deps.logger.child({ taskId, workerId, jobId: job.id });
    const started = performance.now();

    let claim: ClaimResult;
    try {
      // A worker's loop starts with turn 1's phase: the claim appends it (when the attempt is new and has nothing
      // parked to resume), so the loop's first model call follows the claim with no write in between.
      const firstPhase = workerId !== LEAD_WORKER_ID && this.deps.maxTurns >= 1 ? turnPhase('thinking', 1) : undefined;
      claim = await this.deps.store.claimWorker(taskId, workerId, token, this.deps.hostId, firstPhase);
    } catch (err) {
      // The task was cancelled or finished, or this worker already finished (a crash after its last write):
      // nothing is left to do for this job.
      if (err instanceof StoreError && ['task_finished', 'task_not_found', 'worker_finished'].includes(err.code)) {
        log.info({ reason: err.code }, 'agent job skipped');
        return { workerId, status: 'skipped' };
      }
      // Nothing of this attempt is written yet: the job stays active and the stall check retakes it once its lock
      // has expired and Redis answers (failing the job, with attemptsMade 1, would leave its worker pending for good).
      if (isRedisUnavailable(err)) {
        log.warn({ err }, 'agent job not claimed: Redis unavailable');
        throw new WaitingError();
      }
      throw err;
    }
    const { worker } = claim;
    const ac = this.deps.cancels.register(taskId);
    this.running.set(job.id!, ac);
    log.info({ attempt: worker.attempt, step: job.data.step }, 'agent job started');
    try {
      const result = workerId === LEAD_WORKER_ID ? await this.runLead(job, token, claim, ac) : await this.runWorker(job, token, claim, ac);
      const ms = performance.now() - started;
      this.deps.onFinished?.(result.status === 'completed' ? 'completed' : 'failed', ms);
      log.info({ status: result.status, ms: Math.round(ms) }, 'agent job finished');
      return result;
    } catch (err) {
      return this.settleInterrupted(err, job, token, ac, log);
    } finally {
      this.running.delete(job.id!);
      this.deps.cancels.unregister(taskId, ac);
    }
  };

  private async runWorker(job: Job<AgentJobData>, lease: string, claim: ClaimResult, ac: AbortController): Promise<AgentJobResult> {
    const { approvals } = this.deps;
    const { task, worker, parked } = claim;
    // The workspace's policy is read at the first tool calls, not before the first model call: a worker that calls
    // no tool never needs it (and one that does sees the policy as it is then).
    let rules: Promise<ApprovalRule[]> | undefined;
    // The worker's own rules first, then the task's, then the workspace's, then the defaults (evaluatePolicy).
    const rulesNow = (): Promise<ApprovalRule[]> => (rules ??= approvals.getPolicy(task.workspace_id).then((policy) =>
      [...(JSON.parse(worker.approval_rules ?? '[]') as ApprovalRule[]), ...rulesOf(task.team.approval_policy), ...rulesOf(policy)]));
    let resume: RunAgentOptions['resume'];
    if (parked) {
      const state = parked.resume as ResumeState;
      let records = await approvals.many(task.task_id, parked.approval_ids);
      // The wake-up at the earliest deadline: those past it are denied now (another process may have done it).
      const now = Date.now();
      for (const r of records.filter((a) => a.status === 'pending' && a.expires_at <= now)) {
        await approvals.decide(r.approval_id, 'expired', 'approval timed out', '').catch((err: unknown) => {
          if (!(err instanceof StoreError && err.code === 'approval_decided')) throw err;
        });
      }
      records = await approvals.many(task.task_id, parked.approval_ids);
      if (records.some((a) => a.status === 'pending')) {
        // Woken before every decision arrived: wait again, holding nothing.
        await this.deps.store.finishWorker(task.task_id, worker.worker_id, lease, { outcome: 'waiting' });
        await this.sleepUntilDecided(job, lease, task.task_id, records);
      }
      const byCall = new Map(records.map((a) => [a.call_id, a]));
      // An approved call runs with the approver's modifier, if any (the transcript then shows the amended call).
      const verdicts = state.toolCalls.map((call, i): ToolVerdict => {
        const a = byCall.get(call.id);
        if (!a) return state.denials[i] ?? null;
        if (a.status === 'approved') return a.modifier ? { arguments: a.modifier } : null;
        return a.status === 'expired' ? 'approval timed out' : a.decision_reason || `approval ${a.status}`;
      });
      resume = { ...state, verdicts };
    }
    const gate: ToolGate = async (calls, snapshot) => {
      const ruleList = await rulesNow();
      const verdicts = calls.map((call) => evaluatePolicy(ruleList, call.function.name, call.function.arguments));
      const denials = verdicts.map((v) => (v.action === 'deny' ? v.reason : null));
      // An approval for the rest of the task covers the same tool and arguments: those calls run without asking.
      const asking = calls.filter((_, i) => verdicts[i]!.action === 'ask');
      const granted = new Set((await approvals.granted(task.task_id, asking.map((c) => ({ tool: c.function.name, arguments: c.function.arguments }))))
        .flatMap((hit, i) => (hit ? [asking[i]!.id] : [])));
      const now = Date.now();
      const asks: ApprovalRecord[] = calls.flatMap((call, i) => {
        const v = verdicts[i]!;
        if (v.action !== 'ask' || granted.has(call.id)) return [];
        return [{
          approval_id: newApprovalId(task.task_id), workspace_id: task.workspace_id, task_id: task.task_id, worker_id: worker.worker_id,
          call_id: call.id, tool_name: call.function.name, arguments: call.function.arguments, reason: v.reason, timeout_secs: v.timeout_secs,
          status: 'pending', created_at: now, expires_at: now + v.timeout_secs * 1000, order: i,
        }];
      });
      if (asks.length === 0) return denials;
      throw new Parked({ ...snapshot, denials }, asks);
    };
    let outcome: AgentOutcome;
    try {
      outcome = await this.runLoop(task, worker, lease, resolveTools(worker.tools), `Team goal: ${task.goal}`, ac.signal, 'thinking', { gate, resume }, claim.firstPhaseLogged);
    } catch (err) {
      if (!(err instanceof Parked)) throw err;
      await approvals.park(task.task_id, worker.worker_id, lease, { resume: err.state, approval_ids: err.asks.map((a) => a.approval_id) }, err.asks);
      await this.sleepUntilDecided(job, lease, task.task_id, err.asks);
    }
    return this.finish(job, lease, task, worker, outcome!, undefined);
  }

  /**
   * Moves the job to delayed until the earliest approval deadline (the timeout is that delayed job), giving its
   * slot back. A decision promotes the job; one that landed before the move is caught by the re-read here.
   */
  private async sleepUntilDecided(job: Job<AgentJobData>, lease: string, taskId: string, asks: readonly ApprovalRecord[]): Promise<never> {
    const wakeAt = Math.min(...asks.map((a) => a.expires_at));
    await job.moveToDelayed(wakeAt, lease);
    const now = await this.deps.approvals.many(taskId, asks.map((a) => a.approval_id));
    if (!now.some((a) => a.status === 'pending')) await job.promote().catch(() => undefined);
    throw new DelayedError();
  }

  private async runLead(job: Job<AgentJobData>, lease: string, claim: ClaimResult, ac: AbortController): Promise<AgentJobResult> {
    const { task, worker: lead } = claim;
    // The roster as the lead's claim read it: complete once the lead runs to synthesize after its workers.
    let team = claim.team ?? [];
    if (job.data.step === 'plan') {
      let workerIds: string[];
      if (team.length > 1 + task.team.workers.length) {
        // An earlier attempt planned and added its workers, then died (or its job was lost and the task reconciler
        // added it again): keep that team (asking the model again could name other workers and double it) and make
        // sure each worker still to finish has its job, as this job's child. Not a worker whose job has ended: a
        // child that already failed would be waited for again, for ever.
        const unfinished = unfinishedWorkerIds(team);
        const jobs = await this.deps.queue.jobStates(task.task_id, unfinished);
        workerIds = unfinished.filter((id) => jobs.get(id)?.state !== 'finished');
      } else {
        // Numbered from a fixed base, so a plan retried before its workers were added names the same workers.
        const planned = spawnWorkerTool({ maxWorkers: task.team.max_workers, firstIndex: task.team.workers.length + 1, defaultModel: lead.model });
        const outcome = await this.runLoop(task, lead, lease, [planned.tool], `Team goal: ${task.goal}`, ac.signal);
        if (!outcome.ok || planned.spawned.length === 0) {
          // The lead answered alone (or failed): its answer is the task's.
          return this.finish(job, lease, task, lead, outcome, { usage: outcome.usage });
        }
        await this.deps.store.addWorkers(task.task_id, lease, planned.spawned);
        workerIds = planned.spawned.map((w) => w.worker_id);
      }
      await this.deps.queue.addWorkerJobs(task.task_id, workerIds);
      await job.updateData({ ...job.data, step: 'synthesize' });
      await this.deps.store.appendWorkerEvent(task.task_id, LEAD_WORKER_ID, lease, 'worker_phase', { phase: 'waiting_for_workers', mode: 'team', turn: 0 });
      team = await this.waitForChildren(job, lease, task);
    } else if (task.mode === 'planned' && (claim.kind === 'started' || (await job.getDependenciesCount({ unprocessed: true })).unprocessed)) {
      // A synthesize step that did not come back from waiting (its attempt died between planning and waiting), or
      // came back too early: its children may still be running, so wait for them first.
      team = await this.waitForChildren(job, lease, task);
    }
    return this.synthesize(job, lease, task, lead, team, ac);
  }

  /**
   * Parks the lead until its children finish (the job comes back for its synthesize step), or returns at once if
   * they already have. The roster says `waiting` before BullMQ parks the job, so the job's next run resumes it.
   * Returns the roster as the lead's reclaim read it (its workers all finished, or their jobs not lost).
   */
  private async waitForChildren(job: Job<AgentJobData>, lease: string, task: TaskContext): Promise<WorkerView[]> {
    await this.deps.store.finishWorker(task.task_id, LEAD_WORKER_ID, lease, { outcome: 'waiting' });
    for (let round = 0; ; round++) {
      if (await job.moveToWaitingChildren(lease)) throw new WaitingChildrenError();
      // No child to wait for. A worker that has not ended and has no job had its add lost (a failover lost the
      // addBulk its dying master acknowledged): add it again and wait again, a few rounds at most. Not a worker
      // whose job has ended: BullMQ would link a failed job back, and the lead would wait for it for ever.
      if (round === RELINK_ROUNDS) break;
      const unfinished = unfinishedWorkerIds((await this.deps.store.getTask(task.task_id))?.workers ?? []);
      if (unfinished.length === 0) break;
      const jobs = await this.deps.queue.jobStates(task.task_id, unfinished);
      const lost = unfinished.filter((id) => jobs.get(id)?.state === 'missing');
      if (lost.length === 0) break;
      this.deps.logger.warn({ taskId: task.task_id, workerIds: lost }, 'lead found its workers\' jobs missing: adding them again');
      await this.deps.queue.addWorkerJobs(task.task_id, lost);
    }
    return (await this.deps.store.claimWorker(task.task_id, LEAD_WORKER_ID, lease, this.deps.hostId)).team ?? [];
  }

  /** The lead turns its workers' results into the task's result. */
  private async synthesize(job: Job<AgentJobData>, lease: string, task: TaskContext, lead: WorkerRecord, team: WorkerView[], ac: AbortController): Promise<AgentJobResult> {
    const workers = team.filter((w) => w.worker_id !== LEAD_WORKER_ID);
    // The task's usage is the team's: every worker's plus the lead's.
    const workersUsage = workers.reduce((sum, w) => addUsage(sum, w.usage), ZERO);
    const done = workers.filter((w) => w.status === 'completed');
    if (done.length === 0) {
      const message = workers.length === 0 ? 'the team has no workers' : 'every worker failed';
      return this.finish(job, lease, task, lead, { ok: false, reason: 'team_failed', message, usage: ZERO, turns: 0 }, { usage: workersUsage });
    }
    const report = workers
      .map((w) => `- ${w.worker_id} (${w.role}): ${w.status === 'completed' ? w.result : `failed (${w.failure_reason})`}`)
      .join('\n');
    const input = `Team goal: ${task.goal}\n\nCombine your workers' results into the team's answer.\nWorker results:\n${report}`;
    const outcome = await this.runLoop(task, lead, lease, [], input, ac.signal, 'synthesizing');
    return this.finish(job, lease, task, lead, outcome, { usage: addUsage(workersUsage, outcome.usage) });
  }

  /** `firstTurnLogged`: the claim already appended turn 1's phase. */
  private runLoop(task: TaskContext, worker: WorkerRecord, lease: string, tools: AgentTool[], input: string, signal: AbortSignal, phase: WorkerPhaseName = 'thinking', approval?: { gate: ToolGate; resume: RunAgentOptions['resume'] }, firstTurnLogged = false): Promise<AgentOutcome> {
    const { store } = this.deps;
    const hooks: AgentHooks = {
      onTurn: async (turn) => {
        if (turn === 1 && firstTurnLogged) return;
        await store.appendWorkerEvent(task.task_id, worker.worker_id, lease, 'worker_phase', turnPhase(phase, turn));
      },
      onToolCall: async (call) => {
        await store.appendWorkerEvent(task.task_id, worker.worker_id, lease, 'worker_tool_call', { tool: call.tool, call_id: call.callId, arguments: call.arguments });
      },
    };
    return runAgent({
      client: this.deps.model,
      spec: { role: worker.role, instructions: worker.instructions, model: worker.model ?? this.deps.defaultModel, tools, maxTurns: this.deps.maxTurns, timeoutMs: this.deps.workerTimeoutMs },
      input,
      signal,
      hooks,
      ...(approval && { gate: approval.gate }),
      ...(approval?.resume && { resume: approval.resume }),
      ...(this.deps.observer && { observer: this.deps.observer }),
    });
  }

  /**
   * Records the attempt's outcome and, for the lead (`team` given), the task's, with the team's total usage. A
   * failed worker fails its job without retry: the model already had its retries, and the lead carries on with the
   * others' results.
   */
  private async finish(job: Job<AgentJobData>, lease: string, task: TaskContext, worker: WorkerRecord, outcome: Outcome, team: { usage: TokenUsage } | undefined): Promise<AgentJobResult> {
    const isLead = team !== undefined;
    if (outcome.ok) {
      await this.deps.store.finishWorker(task.task_id, worker.worker_id, lease, { outcome: 'completed', result: outcome.result, usage: outcome.usage },
        isLead ? { status: 'completed', result: outcome.result, usage: team.usage } : undefined, task.workspace_id);
      if (isLead) this.deps.onTaskFinished?.('completed', (Date.now() - job.timestamp) / 1000);
      return { workerId: worker.worker_id, status: 'completed', result: outcome.result };
    }
    if (outcome.reason === 'cancelled') throw new AbortedError();
    await this.deps.store.finishWorker(task.task_id, worker.worker_id, lease, { outcome: 'failed', reason: outcome.reason, message: outcome.message },
      isLead ? { status: 'failed', reason: outcome.reason === 'team_failed' ? outcome.message : `lead failed: ${outcome.reason}: ${outcome.message}` } : undefined, task.workspace_id);
    if (isLead) this.deps.onTaskFinished?.('failed', (Date.now() - job.timestamp) / 1000);
    this.deps.logger.warn({ taskId: task.task_id, workerId: worker.worker_id, jobId: job.id, reason: outcome.reason, message: outcome.message }, 'agent failed');
    throw new UnrecoverableError(`${outcome.reason}: ${outcome.message}`);
  }

  /** A loop that stopped before its outcome could be recorded: decide from why it stopped. */
  private async settleInterrupted(err: unknown, job: Job<AgentJobData>, lease: string, ac: AbortController, log: Logger): Promise<AgentJobResult> {
    if (err instanceof UnrecoverableError || err instanceof WaitingChildrenError || err instanceof DelayedError) throw err;
    const { taskId, workerId } = job.data;
    const cause = ac.signal.reason as AbortCause | undefined;
    const storeCode = err instanceof StoreError ? err.code : undefined;
    if (cause === 'cancelled' || storeCode === 'task_finished') {
      // The cancel already wrote this worker's end into the log.
      log.info('agent stopped: task cancelled');
      return { workerId, status: 'skipped' };
    }
    if (cause === 'lease_lost' || storeCode === 'lease_lost') {
      // Another process holds the job now; anything we wrote would be refused.
      log.warn('agent stopped: lock lost to another worker');
      throw new Error('lock lost');
    }
    if (cause === 'shutdown') {
      // Hand the job back: the next attempt starts on another worker. The drain deadline has passed: Redis gets SHUTDOWN_HAND_BACK_MS.
      const released = { outcome: 'released', reason: 'worker_shutdown', message: `host ${this.deps.hostId} shut down` } as const;
      return handJobBack(job, lease, { record: () => this.deps.store.finishWorker(taskId, workerId, lease, released), waitMs: SHUTDOWN_HAND_BACK_MS, log, onHandedBack: () => this.deps.onHandedBack?.('worker_shutdown') });
    }
    if (isRedisUnavailable(err)) return this.rideOutOutage(err as Error, job, lease, ac.signal, log);
    log.error({ err }, 'agent job failed');
    await this.deps.store
      .finishWorker(taskId, workerId, lease, { outcome: 'failed', reason: 'internal_error', message: err instanceof Error ? err.message : String(err) },
        workerId === LEAD_WORKER_ID ? { status: 'failed', reason: 'lead failed: internal_error' } : undefined)
      .catch(() => undefined);
    throw new UnrecoverableError(`internal_error: ${err instanceof Error ? err.message : String(err)}`);
  }

  /** The loop's write found Redis unavailable: see rideOutOutage; a lead that gives up fails its task with it. */
  private rideOutOutage(err: Error, job: Job<AgentJobData>, lease: string, signal: AbortSignal, log: Logger): Promise<never> {
    const { taskId, workerId } = job.data;
    const task = (message: string) => (workerId === LEAD_WORKER_ID ? { status: 'failed', reason: `lead failed: redis_unavailable: ${message}` } as const : undefined);
    return rideOutOutage(job, lease, {
      err, where: `to host ${this.deps.hostId}`, maxAttempts: this.deps.maxAttempts, waitMs: this.deps.redisWaitMs, signal, log, onHandedBack: () => this.deps.onHandedBack?.('redis_unavailable'),
      release: (message) => this.deps.store.finishWorker(taskId, workerId, lease, { outcome: 'released', reason: 'redis_unavailable', message }),
      giveUp: (message) => this.deps.store.finishWorker(taskId, workerId, lease, { outcome: 'failed', reason: 'redis_unavailable', message }, task(message)),
    });
  }
}

/** An agent loop's outcome, or the lead's when it had nothing to combine. */
type Outcome = AgentOutcome | { ok: false; reason: 'team_failed'; message: string; usage: TokenUsage; turns: number };

/** How many times a lead with no child to wait for adds its workers' missing jobs again before it goes on. */
const RELINK_ROUNDS = 3;

/** A parked loop's snapshot plus the denials the policy made without asking. */
type ResumeState = AgentSnapshot & { denials: (string | null)[] };

/** The worker_phase an agent loop's turn appends. */
const turnPhase = (phase: WorkerPhaseName, turn: number) => ({ phase, mode: 'react', turn }) as const;

/** A policy's rules as stored: Lua's cjson writes an empty list as `{}`, so anything but a list means none. */
function rulesOf(policy: { rules: ApprovalRule[] } | undefined): ApprovalRule[] {
  return Array.isArray(policy?.rules) ? policy.rules : [];
}


/** Thrown by the gate to stop the loop at a tool-call boundary whose calls need decisions. */
class Parked extends Error {
  readonly state: ResumeState;
  readonly asks: ApprovalRecord[];
  constructor(state: ResumeState, asks: ApprovalRecord[]) {
    super('parked for approval');
    this.state = state;
    this.asks = asks;
  }
}

class AbortedError extends Error {
  constructor() {
    super('agent loop aborted');
  }
}

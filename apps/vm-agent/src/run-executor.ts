import { randomUUID } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type OpenAI from 'openai';
import type { ChatCompletionMessageFunctionToolCall } from 'openai/resources/chat/completions';
import { runAgent, type AgentObserver, type AgentOutcome, type AgentTool } from '@cadre/agent';
import { inSpan, type Logger } from '@cadre/observability';
import { isUuid } from '@cadre/protocol';
import { backoffDelay } from './backoff.ts';
import type { VmAgentConfig } from './config.ts';
import { EventRelay } from './event-relay.ts';
import { isFenced, isUnavailable, type AssignedRun, type ControlCommand, type GatewayClient, type HeartbeatResponse } from './gateway-client.ts';
import { ActiveTimeBudget } from './active-time.ts';
import { RunGate } from './run-gate.ts';
import { vmTools } from './tools/index.ts';

export interface RunExecutorDeps {
  client: GatewayClient;
  model: OpenAI;
  logger: Logger;
  /** `workdir` is where each run gets its directory (main.ts picks it when VM_AGENT_WORKDIR is unset). */
  config: Pick<VmAgentConfig, 'workerId' | 'userId' | 'model' | 'maxTurns' | 'runTimeoutMs' | 'shellTimeoutMs'> & { workdir: string };
  /** Acknowledge an applied command on the next heartbeat. */
  ack(commandId: string): void;
  /** Metrics of the agent loop. */
  observer?: AgentObserver;
  /** A run left this agent: `completed`/`failed` (its final event relayed) or `left` (stopped, fenced, handed back). */
  onRunEnded?(outcome: 'completed' | 'failed' | 'left'): void;
}

/** How often a call waiting for its approval asks whether it was decided. */
const APPROVAL_POLL_MS = 250;

const INSTRUCTIONS =
  "You run on a VM. Do the user's task with your tools: shell runs a command in your working directory, " +
  'read_file and write_file read and write files in it (relative paths). Answer with a short summary when done.';

/** Command ids already applied, so a redelivered command (its ack was lost) is applied at most once. */
class RecentIds {
  private readonly ids = new Set<string>();
  private readonly cap: number;
  constructor(cap: number) {
    this.cap = cap;
  }
  has(id: string): boolean {
    return this.ids.has(id);
  }
  add(id: string): void {
    this.ids.add(id);
    if (this.ids.size > this.cap) this.ids.delete(this.ids.values().next().value!);
  }
}

/**
 * Takes assignments from heartbeat answers and executes one run at a time, asynchronously, so the heartbeat
 * loop keeps beating. Control commands reach the run they name; the rest are acknowledged and ignored.
 */
export class RunExecutor {
  private readonly deps: RunExecutorDeps;
  private current: ActiveRun | null = null;
  private accepting = true;
  private readonly applied = new RecentIds(1000);
  private idleWaiters: (() => void)[] = [];

  constructor(deps: RunExecutorDeps) {
    this.deps = deps;
  }

  get busy(): boolean {
    return this.current !== null;
  }

  get currentRunId(): string | null {
    return this.current?.runId ?? null;
  }

  /** One heartbeat answer: controls first (a stop frees this agent), then the assignment. */
  handle(res: HeartbeatResponse): void {
    for (const command of res.control_commands) this.applyCommand(command);
    // The server no longer binds this agent to the run it is executing (its lease expired while the agent was
    // away or parked): nobody will resume or stop it, and another agent may have it. Drop it.
    if (this.current && res.worker.current_run_id !== this.current.runId) this.current.fence();
    if (res.assigned_run) this.accept(res.assigned_run);
  }

  /** Takes no new run; an assignment already made is left to expire back to the queue. */
  stopAccepting(): void {
    this.accepting = false;
  }

  /** Resolves true once no run executes, false if that takes longer than `timeoutMs`. */
  whenIdle(timeoutMs: number): Promise<boolean> {
    if (!this.current) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.idleWaiters = this.idleWaiters.filter((w) => w !== done);
        resolve(false);
      }, timeoutMs);
      const done = (): void => {
        clearTimeout(timer);
        resolve(true);
      };
      this.idleWaiters.push(done);
    });
  }

  /** Aborts the current run without a word to the gateway: its lease expires and the run is requeued. */
  async abandon(): Promise<void> {
    const run = this.current;
    if (!run) return;
    run.abandon();
    await this.whenIdle(2_000);
  }

  private applyCommand(command: ControlCommand): void {
    if (!this.applied.has(command.command_id)) {
      this.applied.add(command.command_id);
      if (this.current?.runId === command.run_id) this.current.apply(command);
      else this.deps.logger.debug({ commandId: command.command_id, runId: command.run_id, action: command.action }, 'command for a run this agent does not execute; acknowledged');
    }
    this.deps.ack(command.command_id);
  }

  private accept(assigned: AssignedRun): void {
    if (!this.accepting) return;
    if (this.current) {
      // Re-sent until dispatched; when busy with another run, it waits for the next heartbeat.
      if (this.current.runId !== assigned.run_id || this.current.leaseId !== assigned.lease_id) {
        this.deps.logger.debug({ runId: assigned.run_id, busyWith: this.current.runId }, 'assignment while busy; taking it when free');
      }
      return;
    }
    const run = new ActiveRun(assigned, this.deps);
    this.current = run;
    run
      .execute()
      .catch((err: unknown) => this.deps.logger.error({ err, runId: run.runId }, 'run execution failed unexpectedly'))
      .finally(() => {
        if (this.current === run) this.current = null;
        const waiters = this.idleWaiters;
        this.idleWaiters = [];
        for (const waiter of waiters) waiter();
      });
  }
}

type Ending = 'stopped' | 'fenced' | 'abandoned';
type Outcome = AgentOutcome | { ok: false; reason: string; message: string };

/** One assigned run, from worker-dispatched to its last relayed event. */
class ActiveRun {
  readonly runId: string;
  readonly leaseId: string;
  private readonly assigned: AssignedRun;
  private readonly deps: RunExecutorDeps;
  private readonly log: Logger;
  private readonly controller = new AbortController();
  private readonly gate: RunGate;
  private readonly relay: EventRelay;
  private ending: Ending | null = null;
  /** The run's deadline in active time; set when the agent starts. */
  private budget: ActiveTimeBudget | undefined;

  constructor(assigned: AssignedRun, deps: RunExecutorDeps) {
    this.assigned = assigned;
    this.deps = deps;
    this.runId = assigned.run_id;
    this.leaseId = assigned.lease_id;
    this.log = deps.logger.child({ runId: assigned.run_id, leaseId: assigned.lease_id });
    this.gate = new RunGate(assigned.control_mode);
    this.relay = new EventRelay({
      client: deps.client,
      runId: assigned.run_id,
      workerId: deps.config.workerId,
      leaseId: assigned.lease_id,
      logger: this.log,
      onFenced: (err) => {
        if (this.end('fenced')) this.log.info({ status: err.status }, 'the run ended or this agent lost its lease; dropping it');
      },
    });
  }

  /** The run's span holds its dispatch, model and tool calls and relays (run_id as attribute). */
  execute(): Promise<void> {
    return inSpan('run', { attributes: { run_id: this.runId } }, () => this.executeRun());
  }

  private async executeRun(): Promise<void> {
    const { config, client } = this.deps;
    if (!isUuid(this.runId)) {
      this.log.error('assigned run id is not a UUID; refusing to use it as a directory name');
      return;
    }
    // Retried while the gateway is unreachable: a repeated dispatch by the holder is harmless server-side, and
    // giving up after a lost reply would leave the run `running` with nobody executing it.
    const dispatch = { worker_id: config.workerId, ...(config.userId !== undefined && { user_id: config.userId }), turn_ref: randomUUID(), conversation_ref: this.assigned.conversation_ref, lease_id: this.leaseId };
    for (let attempt = 1; ; attempt++) {
      try {
        await client.dispatched(this.runId, dispatch);
        break;
      } catch (err) {
        if (isFenced(err)) return void this.log.info({ err: (err as Error).message }, 'run is no longer held by this agent; dropped');
        if (!isUnavailable(err) || attempt >= 6 || this.ending) {
          return void this.log.warn({ err: (err as Error).message }, 'worker-dispatched failed; the assignment will be re-sent');
        }
        await sleep(backoffDelay(attempt, { baseMs: 200, maxMs: 2_000 }));
      }
    }
    if (this.ending) return;
    this.log.info('run dispatched');
    this.relay.start();

    const outcome = await this.runAgent();
    if (this.ending) {
      this.relay.discard();
      this.log.info({ ending: this.ending }, 'run left without a final event');
      this.deps.onRunEnded?.('left');
      return;
    }
    if (outcome.ok) {
      this.relay.push('assistant-message', { content: outcome.result });
      this.relay.push('streaming-complete', { usage: outcome.usage, turns: outcome.turns });
    } else {
      this.relay.push('error', { reason: outcome.reason, message: outcome.message });
    }
    const delivered = await this.relay.drain();
    this.log.info({ ok: outcome.ok, delivered, ...(!outcome.ok && { reason: outcome.reason }) }, 'run finished');
    this.deps.onRunEnded?.(outcome.ok ? 'completed' : 'failed');
  }

  private async runAgent(): Promise<Outcome> {
    const { config, model } = this.deps;
    this.budget = new ActiveTimeBudget(config.runTimeoutMs);
    try {
      const runDir = join(config.workdir, this.runId);
      await mkdir(runDir, { recursive: true });
      const tools = vmTools(runDir, { shellTimeoutMs: config.shellTimeoutMs });
      return await runAgent({
        client: model,
        // Paused or overridden time does not count against VM_AGENT_RUN_TIMEOUT_MS.
        deadline: this.budget.signal,
        spec: {
          role: this.assigned.agent_id || 'vm',
          instructions: INSTRUCTIONS,
          model: config.model,
          tools: tools.map((tool) => this.reportingResults(tool)),
          maxTurns: config.maxTurns,
          timeoutMs: config.runTimeoutMs,
        },
        input: this.assigned.query,
        signal: this.controller.signal,
        gate: (calls) => this.approvals(calls, tools),
        ...(this.deps.observer && { observer: this.deps.observer }),
        hooks: {
          onTurn: (turn) => this.onTurn(turn),
          onToolCall: async (call) => {
            this.relay.push('tool-call', { tool: call.tool, call_id: call.callId, arguments: call.arguments });
          },
        },
      });
    } catch (err) {
      return { ok: false, reason: 'agent_error', message: err instanceof Error ? err.message : String(err) };
    } finally {
      this.budget.dispose();
    }
  }

  /**
   * Asks the gateway about a turn's tool calls before they run (the workspace's approval policy). For each
   * `ask` the call waits here, polling its approval until someone decides it or its deadline passes (the gateway
   * expires it then); the wait holds nothing on the gateway and does not count against the run's time budget.
   * Each call goes with its tool's parameter schema, so an approver may amend its arguments (a modifier).
   * Returns per call null (run it), why not (the model sees `error: tool call denied: <why>`), or the approver's
   * amended arguments to run it with.
   */
  private async approvals(calls: ChatCompletionMessageFunctionToolCall[], tools: readonly AgentTool[]): Promise<(string | null | { arguments: string })[]> {
    const { client, config } = this.deps;
    // The calls' tool-call events reach the log before their approval-requested events.
    await this.relay.drain();
    const schemas = new Map(tools.map((t) => [t.name, t.parameters]));
    const proposed = calls.map((c) => {
      const schema = schemas.get(c.function.name);
      return { call_id: c.id, tool_name: c.function.name, arguments: c.function.arguments, ...(schema && { parameters_schema: schema }) };
    });
    const verdicts = await client.proposeCalls(this.runId, config.workerId, this.leaseId, proposed);
    const asks = verdicts.filter((v) => v.action === 'ask');
    if (asks.length > 0) {
      this.log.info({ approvals: asks.map((a) => a.approval_id) }, 'waiting for approvals');
      this.budget?.pause();
    }
    try {
      return await Promise.all(verdicts.map(async (v) => {
        if (v.action === 'allow') return null;
        if (v.action === 'deny') return v.reason;
        for (;;) {
          this.controller.signal.throwIfAborted();
          const a = await client.approval(this.runId, v.approval_id, this.controller.signal).catch((err: unknown) => {
            if (isUnavailable(err)) return null;
            throw err;
          });
          if (a?.status === 'approved') return a.modifier ? { arguments: a.modifier } : null;
          if (a && a.status !== 'pending') return a.status === 'expired' ? 'approval timed out' : a.decision_reason || `approval ${a.status}`;
          // Poll faster near the deadline, so an expiry is seen soon after it.
          await sleep(Math.max(50, Math.min(APPROVAL_POLL_MS, v.expires_at - Date.now() + 10)), undefined, { signal: this.controller.signal });
        }
      }));
    } finally {
      if (asks.length > 0) this.budget?.resume();
    }
  }

  /** The turn boundary: parks here while paused or under human override. */
  private async onTurn(turn: number): Promise<void> {
    if (this.gate.closed) {
      this.log.info({ turn, controlMode: this.gate.mode }, 'parked at the turn boundary');
      this.budget?.pause();
      await this.gate.pass(this.controller.signal);
      this.budget?.resume();
      if (this.controller.signal.aborted) return;
      this.log.info({ turn }, 'continuing');
    }
    this.relay.push('turn-started', { turn });
  }

  /** The tool, plus a `tool-result` event per call carrying the id of the `tool-call` it answers. */
  private reportingResults(tool: AgentTool): AgentTool {
    return {
      ...tool,
      run: async (args, ctx) => {
        const callId = ctx.callId;
        try {
          const output = await tool.run(args, ctx);
          this.relay.push('tool-result', { tool: tool.name, call_id: callId, ok: true, output: clip(output, 4_000) });
          return output;
        } catch (err) {
          if (!ctx.signal.aborted) this.relay.push('tool-result', { tool: tool.name, call_id: callId, ok: false, error: clip(String((err as Error).message ?? err), 1_000) });
          throw err;
        }
      },
    };
  }

  apply(command: ControlCommand): void {
    const log = this.log.child({ commandId: command.command_id, action: command.action });
    switch (command.action) {
      case 'stop':
        // The run is already `stopped` server-side: the log records what follows but the run stays stopped, so only
        // the acknowledgement is sent.
        if (!this.end('stopped')) return;
        log.info('stop: aborting the run');
        void this.deps.client
          .relay(this.runId, this.deps.config.workerId, this.leaseId, [
            { event_type: 'run-control-applied', source: 'vm-agent', payload: { command_id: command.command_id, action: 'stop', control_mode: this.gate.mode } },
          ], randomUUID())
          .catch((err: unknown) => (isFenced(err) ? log.debug('run-control-applied for stop refused (the run was handed on)') : log.warn({ err: (err as Error).message }, 'run-control-applied for stop failed')));
        return;
      case 'pause':
        this.gate.pause();
        break;
      case 'resume':
        this.gate.resume();
        break;
      case 'set-control-mode':
        if (command.control_mode) this.gate.setMode(command.control_mode);
        break;
      default: {
        const never: never = command.action;
        log.warn({ action: never }, 'unknown control action; acknowledged and ignored');
        return;
      }
    }
    log.info({ controlMode: this.gate.mode, parked: this.gate.closed }, 'control applied');
    this.relay.push('run-control-applied', { command_id: command.command_id, action: command.action, control_mode: this.gate.mode });
  }

  abandon(): void {
    if (this.end('abandoned')) this.log.warn('abandoning the run; its lease will expire and it will be requeued');
  }

  /** The gateway says this agent no longer holds the run. */
  fence(): void {
    if (this.end('fenced')) this.log.info('the gateway no longer binds this agent to the run; dropping it');
  }

  /** Ends the run early: aborts the model call and running tools, sends nothing more. False if already ending. */
  private end(ending: Ending): boolean {
    if (this.ending) return false;
    this.ending = ending;
    this.relay.discard();
    this.controller.abort(new Error(`run ${ending}`));
    return true;
  }
}


function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}… [${text.length - max} more characters]`;
}

import type OpenAI from 'openai';
import type { ChatCompletionFunctionTool, ChatCompletionMessageFunctionToolCall } from 'openai/resources/chat/completions';
import { builtinTools, modelErrorMessage, observeModelCall, redact, runToolCall, streamModelTurn, untilAborted, type AgentObserver, type AgentTool } from '@cadre/agent';
import { inSpan, savedTrace, type Logger } from '@cadre/observability';
import type { AttemptLostReason, SessionEventInput, TokenUsage } from '@cadre/protocol';
import { StoreError, evaluatePolicy, newSessionApprovalId, type ApprovalRule, type PolicyVerdict, type ClientCall, type EndedTurn, type SessionStore, type TurnCommit, type TurnState } from '@cadre/store';
import { afterDecision } from './approvals.ts';
import { SUMMARY_HEADING, compactionPlan, estimateTokens, summarise, wasCompacted } from './compaction.ts';
import { DeltaBuffer } from './delta-buffer.ts';
import { keepSessionAlive } from './keep-alive.ts';
import { parseArguments, requestedPayload } from './session-engine.ts';
import { changeAndEnqueue, type SessionQueue } from './session-queue.ts';
import { SteerWatch } from './steer-watch.ts';
import { turnSeconds } from './turn-seconds.ts';
import { clientResultText, modelMessages, nextStep, type TranscriptMessage } from './transcript.ts';

export interface TurnRunnerDeps {
  store: SessionStore;
  queue: SessionQueue;
  model: OpenAI;
  hostId: string;
  /** Model calls per turn before it ends with stop_reason max_turns. */
  maxModelCalls?: number;
  /** A client tool's deadline when neither the call's tool nor the session sets one. */
  defaultToolTimeoutMs?: number;
  /**
   * Calls `onSteer` when a steer in interrupt mode `immediate` reaches the session (the worker's cancel
   * listener); returns the unsubscribe. Without it steers wait for the next boundary (mode `wait`).
   */
  watchSteering?: (sessionId: string, onSteer: () => void) => () => void;
  /** The workspace's approval rules (checked after the session's own); without it only the session's apply. */
  workspaceRules?: (workspaceId: string) => Promise<ApprovalRule[]>;
  /** Hears of every model call (model, outcome, latency, tokens): the worker's metrics, as for team agents. */
  observer?: AgentObserver;
  /** Hears of every turn this runner ends and every parked turn it resumes: the worker's session metrics. */
  turns?: TurnObserver;
  /** Where a failed keep-alive of a running turn's session is told (once per job run). */
  logger?: Logger;
}

/** A session turn's end (its stop reason; seconds since the user message, when known) and a parked turn's resume. */
export interface TurnObserver {
  turnEnded(turn: { outcome: string; seconds?: number }): void;
  resumed(resume: { parkedSeconds: number }): void;
}

/** A turn a job run has claimed (TurnRunner.claim), to run with TurnRunner.run. */
export interface ClaimedTurn {
  sessionId: string;
  lease: string;
  /** The attempt number (above 1 when an earlier attempt was lost or handed back). */
  attempt: number;
  /** The turn as loaded right after the claim: the first step's state. */
  state: TurnState | null;
  steering: SteerWatch | undefined;
}

/** How a job run of a turn ended: the turn finished, it parked (waiting for clients), or there was nothing to do. */
export type TurnRunOutcome = 'finished' | 'parked' | 'stale';

const ZERO: TokenUsage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };

/**
 * The durable agent loop of a session turn, run by a worker job. Every step starts from the persisted state
 * (transcript, client calls) and ends with one fenced commit, so a job that dies at any point is resumed by
 * another from its last boundary: a model call whose answer was not committed runs again, a tool that has a
 * result is never run again. When the turn must wait for client tools it parks: the job ends and the worker slot
 * is free; the last ToolResult (or a deadline job) enqueues the continuation.
 */
export class TurnRunner {
  private readonly deps: Required<Omit<TurnRunnerDeps, 'watchSteering' | 'workspaceRules' | 'observer' | 'turns' | 'logger'>>;
  private readonly watchSteering: TurnRunnerDeps['watchSteering'];
  private readonly workspaceRules: NonNullable<TurnRunnerDeps['workspaceRules']>;
  private readonly observer: TurnRunnerDeps['observer'];
  private readonly turns: TurnRunnerDeps['turns'];
  private readonly logger: TurnRunnerDeps['logger'];

  constructor(deps: TurnRunnerDeps) {
    this.deps = { maxModelCalls: 16, defaultToolTimeoutMs: 120_000, ...deps };
    this.watchSteering = deps.watchSteering;
    this.workspaceRules = deps.workspaceRules ?? (() => Promise.resolve([]));
    this.observer = deps.observer;
    this.turns = deps.turns;
    this.logger = deps.logger;
  }

  /**
   * Takes the turn for this job run (lease = its lock token), or null when there is nothing to run. The turn's
   * first load goes right behind the claim on the same connection (one round trip for both), and steer notices are
   * heard from before it (SteerWatch); run() ends the watch.
   */
  async claim(sessionId: string, wake: number, lease: string): Promise<ClaimedTurn | null> {
    const steering = this.watchSteering && new SteerWatch(this.deps.store, sessionId, this.watchSteering);
    try {
      const [claim, state] = await Promise.all([this.deps.store.claimTurn(sessionId, wake, lease, this.deps.hostId), this.deps.store.loadTurn(sessionId)]);
      if (claim.parkedAt !== undefined) this.turns?.resumed({ parkedSeconds: Math.max(0, Date.now() - claim.parkedAt) / 1000 });
      if (claim.kind !== 'stale') return { sessionId, lease, attempt: claim.attempt, state, steering };
    } catch (err) {
      steering?.close();
      throw err;
    }
    steering?.close();
    return null;
  }

  /**
   * Runs the claimed turn until it finishes or parks, keeping its session's keys alive meanwhile (keep-alive.ts),
   * so neither a turn longer than the idle TTL nor one step of it loses them.
   */
  async run(turn: ClaimedTurn, signal: AbortSignal): Promise<TurnRunOutcome> {
    const { sessionId, lease, state } = turn;
    const stopKeepingAlive = state?.status === 'running'
      ? keepSessionAlive({ store: this.deps.store, sessionId, lease, aliveFrom: state.alive_from, idleTtlSec: state.idle_ttl_sec, logger: this.logger })
      : undefined;
    try {
      return await this.runSteps(turn, signal);
    } finally {
      stopKeepingAlive?.();
      turn.steering?.close();
    }
  }

  private async runSteps(turn: ClaimedTurn, signal: AbortSignal): Promise<TurnRunOutcome> {
    const { store } = this.deps;
    const { sessionId, lease, steering } = turn;
    let loaded: TurnState | null | undefined = turn.state;
    let compactionFailed = false;
    while (true) {
      signal.throwIfAborted();
      const state = loaded === undefined ? await store.loadTurn(sessionId) : loaded;
      loaded = undefined;
      if (!state || state.status !== 'running') return 'stale';
      const step = nextStep(state);
      switch (step.kind) {
        case 'model': {
          const modelCalls = (state.transcript.slice(state.turn_started_len) as TranscriptMessage[]).filter((m) => m.role === 'assistant').length;
          // kontekst runs: a denied call ends the turn once its batch is settled; the model cannot get past it.
          if (state.stop_on_denial && state.calls.some((c) => c.approval?.status === 'denied' || c.approval?.status === 'expired')) {
            await this.endTurn(state, lease, [], state.turn_usage, 'denied');
            return 'finished';
          }
          if (modelCalls >= this.deps.maxModelCalls) {
            await this.endTurn(state, lease, [], state.turn_usage, 'max_turns');
            return 'finished';
          }
          // A model-turn boundary: queued steering joins the transcript before the model is called.
          if (state.steers_queued > 0 && (await store.deliverSteering(sessionId, lease)) > 0) break;
          // Before the call that would outgrow max_context_tokens: the earlier turns become one summary.
          const plan: ReturnType<typeof compactionPlan> = compactionFailed ? null : compactionPlan(state);
          if (plan) {
            // A summary the model could not make is not worth failing the turn: it goes on uncompacted.
            compactionFailed = !(await this.compact(state, lease, plan, signal));
            break;
          }
          if (await this.modelCall(state, lease, signal, steering)) return 'finished';
          break;
        }
        case 'run_tools':
          await this.runTools(state, lease, step.calls, signal, step.approved);
          break;
        case 'client_results':
          await store.commitTurn(sessionId, lease, {
            messages: step.calls.map((c) => ({ role: 'tool', tool_call_id: c.tool_call_id, content: clientResultText(c) })),
          });
          break;
        case 'park': {
          const pending = state.calls.filter((c) => c.status === 'pending');
          const parked = await inSpan('park', { attributes: { session_id: sessionId, 'cadre.pending_calls': pending.length } }, async (span) => {
            // Idempotent (job ids per call or approval): a resumed attempt re-schedules what a lost one may not have.
            await this.deps.queue.armDeadlines(sessionId, pending);
            // false: the last answer came in meanwhile, and this job goes on with it.
            const done = await store.parkTurn(sessionId, lease);
            span.setAttribute('cadre.parked', done);
            return done;
          });
          if (parked) return 'parked';
          break;
        }
        case 'finish':
          // The answer was committed but the turn not ended (only after a lost attempt: the two go together).
          if (await this.endTurn(state, lease, [], state.turn_usage, 'end_turn')) return 'finished';
          break;
        default: {
          const never: never = step;
          throw new Error(`unknown step ${String(never)}`);
        }
      }
    }
  }

  private async compact(state: TurnState, lease: string, plan: { count: number; tokensBefore: number }, signal: AbortSignal): Promise<boolean> {
    let summary: string;
    try {
      summary = await summarise(this.deps.model, state, plan.count, signal);
    } catch (err) {
      if (signal.aborted) throw err;
      return false;
    }
    const message = { role: 'user', content: `${SUMMARY_HEADING}\n${summary}` };
    const after: TurnState = { ...state, transcript: [message, ...state.transcript.slice(plan.count)], turn_started_len: 1 };
    await this.deps.store.compactTranscript(state.session_id, lease, state.transcript.length, plan.count, message, {
      tokens_before: plan.tokensBefore,
      tokens_after: estimateTokens(modelMessages(after)),
      messages_before: state.transcript.length,
      messages_after: after.transcript.length,
      summary,
    });
    return true;
  }

  /** A deadline job: the client never answered, so the model gets a tool error and the turn goes on. */
  async expireToolCall(sessionId: string, toolCallId: string, timeoutMs: number): Promise<void> {
    const { store, queue } = this.deps;
    const expire = (): Promise<number> => store.resolveToolCall(sessionId, {
      tool_call_id: toolCallId, success: false, result: `the client did not answer within ${timeoutMs} ms`, timed_out: true,
    });
    // Refused (a StoreError): answered in time, or the turn or session ended, so there is nothing to expire. Any
    // other failure (Redis failing over, out of memory) fails the job, and BullMQ tries it again.
    await changeAndEnqueue(store, queue, sessionId, () => expire().catch(refusedAs(0)), (wake) => wake);
  }

  /** An approval's deadline job: still pending, it expires (denied with "approval timed out") and the turn goes on. */
  async expireApproval(sessionId: string, approvalId: string): Promise<void> {
    const { store, queue } = this.deps;
    // Refused (a StoreError): decided in time, or the turn or session ended, so there is nothing to expire; any other
    // failure fails the job for BullMQ to try again. The continuation goes through the marked enqueue, as every
    // other: a worker that dies before the job is added leaves it to the sweeper.
    const expire = () => store.decideApproval(sessionId, approvalId, 'expired', 'approval timed out', '').catch(refusedAs(null));
    await inSpan('approval_decided', { attributes: { session_id: sessionId, approval_id: approvalId, 'cadre.approval.status': 'expired' } }, async () => {
      await changeAndEnqueue(store, queue, sessionId, expire, (d) => d?.wake ?? 0, async (d) => {
        if (d) await afterDecision(this.deps.queue, sessionId, d);
      });
    });
  }

  /** One streamed model call; its answer is the next boundary. True when the turn ended with it. */
  private async modelCall(state: TurnState, lease: string, signal: AbortSignal, steering: SteerWatch | undefined): Promise<boolean> {
    const { store } = this.deps;
    const sid = state.session_id;
    const stepAbort = new AbortController();
    const buffer = new DeltaBuffer({
      messageId: state.message_id,
      write: (events) => store.commitTurn(sid, lease, { events }),
      onError: (err) => stepAbort.abort(err),
    });
    // Not awaited: its write goes beside the model's request, and the deltas follow it in order.
    buffer.push({ event_type: 'activity', payload: { state: 'thinking', detail: '' } });
    // A steer in interrupt mode `immediate` cuts the stream short; the turn goes on with it (not an abort).
    const steered = new AbortController();
    if (steering && !(await steering.begin(steered))) {
      steering.end();
      await buffer.drain(); // the activity's write: a fenced one throws here
      return false;
    }
    const stepSignal = AbortSignal.any([signal, stepAbort.signal, steered.signal]);
    let answered = '';
    const tools: ChatCompletionFunctionTool[] = [
      ...Object.values(builtinTools).map((t) => functionTool(t.name, t.description, t.parameters)),
      ...state.tools.map((t) => functionTool(t.name, t.description, t.parameters)),
    ];
    let turn;
    try {
      // The same `chat <model>` span and model-call metrics as a team agent's call (a steered cut counts as error).
      turn = await observeModelCall(state.model, this.observer, () => untilAborted(
        streamModelTurn(this.deps.model, { model: state.model, messages: modelMessages(state), tools }, stepSignal, (kind, text) => {
          if (kind === 'text') answered += text;
          buffer.add(kind, text);
        }),
        stepSignal,
      ));
    } catch (err) {
      if (steered.signal.aborted && !signal.aborted && !stepAbort.signal.aborted) {
        // What the model had said stays in the transcript (the client saw it), then the steering message.
        const rest = await buffer.drain();
        const delivered = await store.deliverSteering(sid, lease, { messages: answered ? [{ role: 'assistant', content: answered }] : [], events: rest });
        // The steer went (an abort dropped it): the deltas the client saw stay in the log; the model answers again.
        if (delivered === 0 && rest.length > 0) await store.commitTurn(sid, lease, { events: rest });
        return false;
      }
      if (stepSignal.aborted) {
        buffer.stop();
        // A fenced delta write (lease lost, turn cancelled) surfaces as its own error, not as an abort.
        throw stepAbort.signal.aborted && !signal.aborted ? stepAbort.signal.reason : err;
      }
      const rest = await buffer.drain();
      // Every edge shows the message to the client, and a proxy (LiteLLM) may echo the API key in a 401.
      const message = redact(modelErrorMessage(err), this.deps.model.apiKey);
      await this.endTurn(state, lease, [...rest, { event_type: 'session_error', payload: { code: 'model_error', message, retryable: true } }], state.turn_usage, 'error');
      return true;
    } finally {
      steering?.end();
    }
    const rest = await buffer.drain();
    const usage = addUsage(state.turn_usage, turn.usage);
    const calls = sessionCallIds(state, turn.toolCalls);
    if (calls.length === 0) {
      const stopReason = !turn.finishReason || turn.finishReason === 'stop' ? 'end_turn' : turn.finishReason === 'length' ? 'max_tokens' : turn.finishReason;
      return this.endTurn(state, lease, rest, usage, stopReason, [{ role: 'assistant', content: turn.content }]);
    }
    const clientTools = new Map(state.tools.map((t) => [t.name, t]));
    const rules = [...state.approval_policy, ...(await this.workspaceRules(state.workspace_id))];
    const policy = calls.map((call) => evaluatePolicy(rules, call.function.name, call.function.arguments));
    // An approval for the rest of the session covers the same tool and arguments: those calls go ahead unasked.
    const granted = !policy.some((v) => v.action === 'ask') ? [] : await store.granted(sid, calls.map((c, i) => (policy[i]!.action === 'ask' ? { tool: c.function.name, arguments: c.function.arguments } : { tool: '', arguments: '' })));
    const verdicts: PolicyVerdict[] = policy.map((v, i) => (v.action === 'ask' && granted[i] ? { action: 'allow' } : v));
    const asked = verdicts.filter((v) => v.action === 'ask').length;
    const now = Date.now();
    const clientCalls: ClientCall[] = [];
    const events: SessionEventInput[] = [...rest];
    const approvalEvents: SessionEventInput[] = [];
    calls.forEach((call, order) => {
      const tool = clientTools.get(call.function.name);
      const verdict = verdicts[order]!;
      const timeout = tool ? tool.timeout_ms || this.deps.defaultToolTimeoutMs : 0;
      const base = { tool_call_id: call.id, tool_name: call.function.name, arguments: call.function.arguments, order, timeout_ms: timeout, deadline_ms: now + timeout, ...(!tool && { builtin: true }) };
      const request = { tool_call_id: call.id, tool_name: call.function.name, parameters: parseArguments(call.function.arguments), timeout_ms: timeout };
      if (verdict.action === 'deny') {
        // The policy's answer needs nobody: the model gets the error at once.
        const result = `denied: ${verdict.reason}`;
        clientCalls.push({ ...base, status: 'done', success: false, result });
        events.push({ event_type: 'tool_result', payload: { tool_call_id: call.id, tool_name: call.function.name, success: false, result } });
        return;
      }
      if (verdict.action === 'ask') {
        const approval = { approval_id: newSessionApprovalId(sid), status: 'pending' as const, reason: verdict.reason, timeout_secs: verdict.timeout_secs, created_at: now, expires_at: now + verdict.timeout_secs * 1000 };
        const pending: ClientCall = { ...base, status: 'pending', approval, ...(tool && { request_payload: JSON.stringify(request) }) };
        clientCalls.push(pending);
        approvalEvents.push(
          { event_type: 'approval_requested', payload: requestedPayload(pending, approvalEvents.length / 2 + 1, asked) },
          // roz's permission protocol: one ActivityUpdate("waiting_approval") per call, naming what to decide.
          { event_type: 'activity', payload: { state: 'waiting_approval', detail: approval.approval_id } },
        );
        return;
      }
      if (!tool) {
        events.push({ event_type: 'tool_call', payload: { tool_call_id: call.id, tool_name: call.function.name, arguments: call.function.arguments } });
        return;
      }
      clientCalls.push({ ...base, status: 'pending' });
      events.push({ event_type: 'tool_request', payload: request });
    });
    const requested = clientCalls.filter((c) => !c.builtin && !c.approval && c.status === 'pending');
    if (requested.length > 0) events.push({ event_type: 'activity', payload: { state: 'calling_tool', detail: requested.map((c) => c.tool_name).join(', ') } });
    events.push(...approvalEvents);
    // The calls' trace goes with them: what answers a parked call (a client's result, a decision) joins this trace.
    const trace = savedTrace();
    await store.commitTurn(sid, lease, {
      messages: [{ role: 'assistant', content: turn.content || null, tool_calls: calls }],
      calls: clientCalls,
      fields: { turn_usage: JSON.stringify(usage), ...(trace && { turn_trace: trace }) },
      events,
    });
    for (const c of clientCalls) {
      if (c.approval) await inSpan('approval_requested', { attributes: { session_id: sid, approval_id: c.approval.approval_id, 'gen_ai.tool.name': c.tool_name } }, async () => undefined);
    }
    return false;
  }

  /** Runs builtin (and unknown) tool calls concurrently; their results join the transcript in the model's order. */
  private async runTools(state: TurnState, lease: string, calls: ChatCompletionMessageFunctionToolCall[], signal: AbortSignal, approved: ReadonlySet<string>): Promise<void> {
    const { store } = this.deps;
    // No activity event of its own: the calls' tool_call events (committed with the assistant message) say it.
    // An approved call's tool_call is appended now, as it starts (its approval_requested came with the answer).
    const starting = calls.filter((c) => approved.has(c.id));
    if (starting.length > 0) {
      await store.commitTurn(state.session_id, lease, {
        events: starting.map((c) => ({ event_type: 'tool_call', payload: { tool_call_id: c.id, tool_name: c.function.name, arguments: c.function.arguments } })),
      });
    }
    const byName = new Map<string, AgentTool>(Object.entries(builtinTools));
    const results = await untilAborted(Promise.all(calls.map((call) => runToolCall(call, byName, signal, this.observer))), signal);
    await store.commitTurn(state.session_id, lease, {
      messages: calls.map((call, i) => ({ role: 'tool', tool_call_id: call.id, content: results[i] ?? '' })),
      events: calls.map((call, i) => ({
        event_type: 'tool_result',
        payload: { tool_call_id: call.id, tool_name: call.function.name, success: !(results[i] ?? '').startsWith('error:'), result: (results[i] ?? '').slice(0, 4_000) },
      })),
    });
  }

  /**
   * Ends the turn, unless steering waits (a normal end then delivers it and the turn goes on: false). Queued
   * inputs start the next turn in the same step; its job is enqueued here.
   */
  private async endTurn(state: TurnState, lease: string, events: SessionEventInput[], usage: TokenUsage, stopReason: string, messages: object[] = []): Promise<boolean> {
    const commit: TurnCommit = { messages, fields: { turn_usage: JSON.stringify(usage) }, events };
    const { store, queue } = this.deps;
    const end = await changeAndEnqueue(store, queue, state.session_id, () => store.finishTurn(state.session_id, lease, commit, stopReason), (e) => (e.kind === 'ended' ? e.next : 0));
    if (end.kind !== 'ended') return false;
    this.turns?.turnEnded({ outcome: stopReason, ...turnSeconds(state.turn_started_at) });
    return true;
  }

  /**
   * Lets go of the turn without ending it (its worker's drain deadline passed, or Redis could not take its writes):
   * the job is handed back and another attempt resumes it from its last boundary. Like a lost attempt, it is logged:
   * what this attempt streamed since that boundary will come again, and a client must know to drop it. Rejects as
   * the fenced write does (a lease lost, Redis unavailable).
   */
  async release(sessionId: string, lease: string, attempt: number, why: { reason: AttemptLostReason; message: string }): Promise<void> {
    await this.deps.store.commitTurn(sessionId, lease, {
      fields: { lease: '' },
      events: [{ event_type: 'attempt_lost', payload: { attempt, host_id: this.deps.hostId, ...why } }],
    });
  }

  /**
   * Ends the turn of a job given up on in a retryable error, if `wake` is still the session's turn; what was queued
   * behind it starts the next turn, whose job goes through the marked enqueue. Null when no turn ended.
   */
  async giveUp(sessionId: string, wake: number, error: { code: string; message: string }): Promise<EndedTurn | null> {
    const { store, queue } = this.deps;
    return changeAndEnqueue(store, queue, sessionId, () => store.cancelTurn(sessionId, 'error', { error: { ...error, retryable: true }, onlyWake: wake }), (e) => e?.wake ?? 0);
  }
}

/**
 * The model's tool calls with ids unique in the session. A model's id is not: the scripted model numbers calls by
 * the assistant messages in its request (so once compaction has shortened the transcript it repeats them), and some
 * servers number the calls of each response ("0"). Everything keyed by a call's id — its entry in the turn's calls,
 * its deadline job, the id a client answers with — must name one call, or a late result for an earlier call answers
 * a new one and the new call's deadline job is taken for the earlier's. An id is kept as the model gave it (clients
 * see what they always have) unless it may already have named a call: it is in the transcript, or earlier turns were
 * compacted away with their ids. Then it gets the turn, the model call within it and its place as a suffix
 * (reissuedCallId). The id goes into the transcript as changed, so the model sees the one its result is filed under.
 */
function sessionCallIds(state: TurnState, calls: ChatCompletionMessageFunctionToolCall[]): ChatCompletionMessageFunctionToolCall[] {
  const transcript = state.transcript as TranscriptMessage[];
  const known = new Set(transcript.flatMap((m) => (m.role === 'assistant' ? (m.tool_calls ?? []).map((c) => c.id) : [])));
  const forgotten = wasCompacted(transcript);
  const modelCall = transcript.slice(state.turn_started_len).filter((m) => m.role === 'assistant').length;
  return calls.map((call, i) => {
    if (!forgotten && !known.has(call.id)) {
      known.add(call.id);
      return call;
    }
    return { ...call, id: reissuedCallId(call.id, state.turn, modelCall, i) };
  });
}

/**
 * Providers check the ids they get back in the transcript: Anthropic's and Bedrock's tool ids must match
 * `^[a-zA-Z0-9_-]+$`, OpenAI's are at most 40 characters. So the suffix uses only those characters, and the model's
 * id is shortened to make room (the suffix alone names one call of the session: its turn is the session's own).
 */
export function reissuedCallId(modelId: string, turn: number, modelCall: number, index: number): string {
  const suffix = `_t${turn}_${modelCall}_${index}`;
  return `${modelId.slice(0, Math.max(0, MAX_CALL_ID - suffix.length))}${suffix}`;
}
const MAX_CALL_ID = 40;

/** A store's refusal (nothing left to do) answers `value`; any other failure goes on. */
function refusedAs<T>(value: T): (err: unknown) => T {
  return (err) => {
    if (err instanceof StoreError) return value;
    throw err;
  };
}

function functionTool(name: string, description: string, parameters: Record<string, unknown>): ChatCompletionFunctionTool {
  return { type: 'function', function: { name, description, parameters } };
}

function addUsage(a: TokenUsage, b: TokenUsage): TokenUsage {
  return {
    prompt_tokens: (a ?? ZERO).prompt_tokens + b.prompt_tokens,
    completion_tokens: (a ?? ZERO).completion_tokens + b.completion_tokens,
    total_tokens: (a ?? ZERO).total_tokens + b.total_tokens,
  };
}


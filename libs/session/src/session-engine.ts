import { randomUUID } from 'node:crypto';
import { inSavedTrace, inSpan, tracingEnabled, type Attributes, type Span } from '@cadre/observability';
import { argumentsProblem, builtinTools } from '@cadre/agent';
import { INTERRUPT_MODES, STEERING_MODES, isUuid, type InputKind, type SessionEvent, type SessionEventPayloads } from '@cadre/protocol';
import { RecentMap, StoreError, approvalView, callArguments, type SessionApprovalView, type ApprovalRule, type ClientCall, type EventFanout, type InputModes, type LogWatcher, type SessionRecord, type SessionStore } from '@cadre/store';
import { afterDecision, approvalRules } from './approvals.ts';
import { SessionEngineError, invalid } from './errors.ts';
import { SESSION_LIMITS as L } from './limits.ts';
import { changeAndEnqueue, type SessionQueue } from './session-queue.ts';
import type { SessionReadRepair } from './session-read-repair.ts';
import type { TranscriptMessage } from './transcript.ts';
import type { TurnObserver } from './turn-runner.ts';
import { turnSeconds } from './turn-seconds.ts';
import { checkText, clientTools, imageUrls, type ImageInput, type ToolInput } from './validate.ts';

/** Which workspaces the caller may touch: the gateway's authenticated principal has this shape. */
export type Scope = { workspaces: 'all' } | { workspaces: string };

/** A history message as edges hand it over (roz ConversationMessage parts are flattened by the edge). */
export interface HistoryInput {
  role: 'user' | 'assistant' | 'system';
  content: string;
}

export interface StartInput {
  workspace_id: string;
  model?: string;
  tools?: ToolInput[];
  history?: HistoryInput[];
  project_context?: string[];
  system_context?: string;
  max_context_tokens?: number;
  /** The session's own approval rules, checked before the workspace's (first match wins). */
  approval_policy?: { rules: ApprovalRule[] };
  /** A denied call ends the turn (stop_reason `denied`) instead of feeding the model an error (kontekst runs). */
  stop_on_denial?: boolean;
  /** The authenticated key that owns the session (`/ws` conversations): only it may drive the session's turns. */
  owner?: string;
}

export interface MessageInput {
  content: string;
  message_id?: string;
  /** A full tool snapshot for this turn (roz UserMessage.tools); absent = the session's tools. */
  tools?: ToolInput[];
  system_context?: string;
  /** Images the model sees with the text (roz binary context blocks, HTTP `images`), passed as data URLs. */
  images?: ImageInput[];
}

/** What a steer or follow-up did at once: queued behind the running turn, or started a turn. */
export interface QueuedInputOutcome {
  input_id: string;
  kind: InputKind;
  outcome: 'queued' | 'started';
  position?: number;
}

export interface ToolResultInput {
  tool_call_id: string;
  success: boolean;
  result: string;
  exit_code?: number;
  truncated?: boolean;
  duration_ms?: number;
}

export interface SessionEngineDeps {
  store: SessionStore;
  queue: SessionQueue;
  fanout: EventFanout;
  defaultModel: string;
  /** Models a session may switch to (setModel); the default model is always one. */
  models?: string[];
  defaultMaxContextTokens?: number;
  /** Hears of every turn a cancel, abort or close ends here (outcome `cancelled`, its duration): the gateway's session metrics. */
  turns?: Pick<TurnObserver, 'turnEnded'>;
  /** Hears of each session a client reads, watches or is refused a turn in (a stuck turn whose job was lost is repaired). */
  repair?: Pick<SessionReadRepair, 'seen' | 'refused'>;
}

const WORKSPACE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** About 100 bytes each: 10,000 sessions (ten times the 1,000 streams a gateway is benched with) in ~1 MB. */
const SESSION_WORKSPACES_KEPT = 10_000;

/**
 * The session engine's command side: what every edge (roz StreamSession, the HTTP session API, later WebSocket
 * and stdio) calls. Edges only translate frames; validation, access and state changes live here, so a bad input
 * is refused the same way everywhere and nothing is written for it. Turns run on the worker pool (TurnRunner).
 */
export class SessionEngine {
  private readonly deps: SessionEngineDeps;
  /** Sessions this engine has read or created → their workspace (writeAccess). */
  private readonly workspaces = new RecentMap<string, string>(SESSION_WORKSPACES_KEPT);

  constructor(deps: SessionEngineDeps) {
    this.deps = deps;
  }

  async create(scope: Scope, input: StartInput): Promise<SessionRecord> {
    checkText(input.workspace_id, 128, 'workspace_id', true);
    if (!WORKSPACE.test(input.workspace_id)) throw invalid(`workspace_id must match [A-Za-z0-9][A-Za-z0-9._-]*, got "${input.workspace_id.slice(0, 64)}"`);
    if (scope.workspaces !== 'all' && scope.workspaces !== input.workspace_id) {
      throw new SessionEngineError('permission_denied', `this key is not valid for workspace "${input.workspace_id}"`);
    }
    const model = input.model || this.deps.defaultModel;
    checkText(model, L.model, 'model');
    const tools = clientTools(input.tools ?? [], '', 'tools');
    const history = input.history ?? [];
    if (history.length > L.history) throw invalid(`history: at most ${L.history} messages`);
    const transcript: TranscriptMessage[] = history.map((m, i) => {
      if (!['user', 'assistant', 'system'].includes(m.role)) throw invalid(`history[${i}].role must be user, assistant or system`);
      checkText(m.content, L.historyContent, `history[${i}].content`);
      return { role: m.role, content: m.content } as TranscriptMessage;
    });
    const project = input.project_context ?? [];
    if (project.length > L.projectContextBlocks) throw invalid(`project_context: at most ${L.projectContextBlocks} blocks`);
    project.forEach((block, i) => checkText(block, L.projectContextBlock, `project_context[${i}]`));
    const systemContext = input.system_context ?? '';
    checkText(systemContext, L.systemContext, 'system_context');
    const maxContext = input.max_context_tokens || (this.deps.defaultMaxContextTokens ?? 200_000);
    if (!Number.isInteger(maxContext) || maxContext < 256 || maxContext > L.maxContextTokens) throw invalid(`max_context_tokens must be 256..${L.maxContextTokens}`);
    if (input.owner !== undefined && !OWNER.test(input.owner)) throw invalid('owner must match [A-Za-z0-9._@:-]{1,128}');
    const approvalPolicy = approvalRules(input.approval_policy?.rules ?? [], 'approval_policy.rules');
    const session = await this.deps.store.createSession({
      workspace_id: input.workspace_id, model, tools, transcript, project_context: project, system_context: systemContext, max_context_tokens: maxContext,
      approval_policy: approvalPolicy, stop_on_denial: input.stop_on_denial === true, ...(input.owner && { owner: input.owner }),
    });
    this.workspaces.set(session.session_id, session.workspace_id);
    return session;
  }

  async get(scope: Scope, sessionId: string): Promise<SessionRecord> {
    checkSessionId(sessionId);
    const session = await this.deps.store.getSession(sessionId);
    if (session) this.workspaces.set(sessionId, session.workspace_id);
    if (!session || !visible(scope, session.workspace_id)) throw notFound(sessionId);
    this.deps.repair?.seen(sessionId, session.status, Date.parse(session.updated_at));
    return session;
  }

  /** Starts a turn; refused (turn_in_progress) while one runs, as roz does. */
  async sendMessage(scope: Scope, sessionId: string, input: MessageInput): Promise<{ message_id: string }> {
    checkText(input.content, L.content, 'content', true);
    const messageId = input.message_id || randomUUID();
    checkText(messageId, L.messageId, 'message_id');
    const tools = input.tools && input.tools.length > 0 ? clientTools(input.tools, '', 'tools') : undefined;
    checkText(input.system_context ?? '', L.systemContext, 'system_context');
    const images = imageUrls(input.images ?? []);
    await this.writeAccess(scope, sessionId);
    // The turn's trace: its job (BullMQ's producer and consumer spans) and everything that resumes it hang below.
    try {
      await inSpan('user_message', { attributes: { session_id: sessionId, 'cadre.message_id': messageId } }, () => this.wake(sessionId, () => this.mapped(this.deps.store.startTurn(sessionId, {
        message_id: messageId, content: input.content, ...(tools && { tools }), ...(input.system_context && { system_context: input.system_context }),
        ...(images.length > 0 && { image_urls: images }),
      })), (wake) => wake));
    } catch (err) {
      // The turn in the way may be one whose job was lost: nothing else would ever end it.
      if (err instanceof SessionEngineError && err.code === 'turn_in_progress') this.deps.repair?.refused(sessionId);
      throw err;
    }
    return { message_id: messageId };
  }

  /**
   * A steer (delivered at the running turn's next model-turn boundary) or a follow-up (run as a turn after it).
   * With no turn running it starts one at once. Its outcome follows in the log: input_queued, then
   * input_delivered (with the turn) or input_dropped.
   */
  async queueInput(scope: Scope, sessionId: string, kind: InputKind, input: { content: string; input_id?: string }): Promise<QueuedInputOutcome> {
    checkText(input.content, L.content, 'content', true);
    const inputId = input.input_id || randomUUID();
    checkText(inputId, L.messageId, 'input_id');
    await this.writeAccess(scope, sessionId);
    const result = await this.wake(
      sessionId, () => this.mapped(this.deps.store.queueInput(sessionId, kind, { input_id: inputId, content: input.content }, L.queuedInputs)),
      (r) => (r.kind === 'started' ? r.wake : 0),
    );
    if (result.kind === 'queued') return { input_id: inputId, kind, outcome: 'queued', position: result.position };
    return { input_id: inputId, kind, outcome: 'started' };
  }

  /**
   * abort (no prompt) / abort_and_prompt: queued inputs are dropped (input_dropped), the turn in progress ends
   * (stop_reason cancelled) and the prompt, if any, starts the next turn in the same step.
   */
  async abort(scope: Scope, sessionId: string, prompt?: { content: string; message_id?: string }): Promise<{ aborted: boolean; dropped: number; message_id: string | null }> {
    let messageId: string | null = null;
    if (prompt) {
      checkText(prompt.content, L.content, 'content', true);
      messageId = prompt.message_id || randomUUID();
      checkText(messageId, L.messageId, 'message_id');
    }
    await this.writeAccess(scope, sessionId);
    const result = await this.wake(
      sessionId, () => this.mapped(this.deps.store.abortTurn(sessionId, prompt && messageId ? { message_id: messageId, content: prompt.content } : undefined)), (r) => r.wake,
    );
    if (result.endedTurn) this.deps.turns?.turnEnded({ outcome: 'cancelled', ...turnSeconds(result.endedTurn.started_at) });
    return { aborted: result.endedTurn !== null, dropped: result.dropped, message_id: messageId };
  }

  /**
   * The session a client's conversation reference names (WindieOS `conversation_ref`) in the workspace, or null;
   * `gone` when that session no longer exists (it expired): bindConversation with it re-binds the ref.
   * `owner` is the caller's authenticated key (never a client-claimed id): a ref another key bound is refused.
   */
  async conversationSession(scope: Scope, workspaceId: string, owner: string, ref: string): Promise<{ session_id: string; gone: boolean } | null> {
    checkConversation(workspaceId, owner, ref);
    if (!visible(scope, workspaceId)) throw new SessionEngineError('permission_denied', `this key is not valid for workspace "${workspaceId}"`);
    const binding = await this.deps.store.conversationSession(workspaceId, ref);
    if (!binding) return null;
    if (binding.owner !== owner) throw otherOwner(ref);
    return { session_id: binding.session_id, gone: (await this.deps.store.sessionHead(binding.session_id)) === null };
  }

  /**
   * Binds the ref to a session of the workspace for `owner`; the first binding wins unless `replace`, which only
   * replaces the owner's own, or the binding names `gone` (a session conversationSession found gone). Returns the
   * bound id; a ref another key holds is refused.
   */
  async bindConversation(scope: Scope, owner: string, ref: string, session: SessionRecord, replace: boolean, gone?: string): Promise<string> {
    checkConversation(session.workspace_id, owner, ref);
    if (!visible(scope, session.workspace_id)) throw notFound(session.session_id);
    const binding = await this.deps.store.bindConversation(session.workspace_id, owner, ref, session.session_id, replace, gone);
    if (binding.owner !== owner) throw otherOwner(ref);
    return binding.session_id;
  }

  /** The session, if `owner` may drive it: sessions owned by a key refuse every other key (even of the workspace). */
  async owned(scope: Scope, owner: string, sessionId: string): Promise<SessionRecord> {
    const session = await this.get(scope, sessionId);
    if (session.owner !== null && session.owner !== owner) throw new SessionEngineError('permission_denied', 'this conversation belongs to another key');
    return session;
  }

  /** Steering, follow-up and interrupt modes; they apply from the next boundary on. */
  async setInputModes(scope: Scope, sessionId: string, modes: InputModes): Promise<SessionRecord> {
    const known = new Set(['steering_mode', 'follow_up_mode', 'interrupt_mode']);
    for (const key of Object.keys(modes)) if (!known.has(key)) throw invalid(`unknown mode "${key.slice(0, 64)}"`);
    for (const key of ['steering_mode', 'follow_up_mode'] as const) {
      const mode = modes[key];
      if (mode !== undefined && !(STEERING_MODES as readonly string[]).includes(mode)) throw invalid(`${key} must be one of ${STEERING_MODES.join(', ')}`);
    }
    if (modes.interrupt_mode !== undefined && !(INTERRUPT_MODES as readonly string[]).includes(modes.interrupt_mode)) {
      throw invalid(`interrupt_mode must be one of ${INTERRUPT_MODES.join(', ')}`);
    }
    await this.access(scope, sessionId);
    await this.mapped(this.deps.store.setInputModes(sessionId, modes));
    return this.get(scope, sessionId);
  }

  /** Models a session may switch to, the default first. */
  models(): string[] {
    return [...new Set([this.deps.defaultModel, ...(this.deps.models ?? [])])];
  }

  /** Switches an open session's model (among the configured ones); a running turn's next model call uses it. */
  async setModel(scope: Scope, sessionId: string, model: string): Promise<SessionRecord> {
    checkText(model, L.model, 'model', true);
    if (!this.models().includes(model)) throw invalid(`model must be one of the configured models (${this.models().join(', ')}), got "${model.slice(0, 64)}"`);
    await this.access(scope, sessionId);
    await this.mapped(this.deps.store.setModel(sessionId, model));
    return this.get(scope, sessionId);
  }

  /** The session's conversation as chat messages: user, assistant (with its tool calls) and tool results. */
  async messages(scope: Scope, sessionId: string): Promise<object[]> {
    await this.access(scope, sessionId);
    return this.deps.store.transcript(sessionId);
  }

  /** A client's answer to a ToolRequest; wakes the parked turn when it was the last one it waited for. */
  async submitToolResult(scope: Scope, sessionId: string, input: ToolResultInput): Promise<{ resumed: boolean }> {
    checkText(input.tool_call_id, 128, 'tool_call_id', true);
    checkText(input.result, L.toolResult, 'result');
    if (typeof input.success !== 'boolean') throw invalid('success must be a boolean');
    if (input.exit_code !== undefined && input.success !== (input.exit_code === 0)) {
      throw invalid(`success must equal (exit_code == 0) when exit_code is present (success ${input.success}, exit_code ${input.exit_code})`);
    }
    if (input.duration_ms !== undefined && (!Number.isFinite(input.duration_ms) || input.duration_ms < 0)) throw invalid('duration_ms must be a non-negative number');
    await this.writeAccess(scope, sessionId);
    const wake = await this.resuming(sessionId, 'tool_result', { 'gen_ai.tool.call.id': input.tool_call_id }, () => this.wake(sessionId, () => this.mapped(this.deps.store.resolveToolCall(sessionId, {
      tool_call_id: input.tool_call_id, success: input.success, result: input.result,
      ...(input.exit_code !== undefined && { exit_code: input.exit_code }),
      ...(input.truncated && { truncated: true }),
      ...(input.duration_ms !== undefined && { duration_ms: input.duration_ms }),
    })), (w) => w));
    return { resumed: wake > 0 };
  }

  /**
   * Decides an approval of the session's current turn, once (a second decision: conflict). `id` is the approval
   * id or the call's tool_call_id (roz's PermissionDecision and kontekst's ApproveTool name the call).
   * `decidedBy` is the deciding key's name, never the key. `reach` `session`: the same tool and arguments no longer
   * ask for the rest of the session. `modifier` (approve only): the arguments the call runs with instead of the
   * model's, checked against the tool's schema (a builtin's, or the turn's client tool's) before anything is written.
   */
  async decideApproval(
    scope: Scope, sessionId: string, id: string, approved: boolean, reason: string, decidedBy: string, reach: 'once' | 'session' = 'once', modifier?: Record<string, unknown>,
  ): Promise<SessionApprovalView> {
    checkText(id, 256, 'approval_id', true);
    checkText(reason, L.reason, 'reason');
    const session = await this.get(scope, sessionId);
    if (modifier !== undefined) await this.checkModifier(sessionId, id, approved, modifier);
    const status = approved ? 'approved' : 'denied';
    return this.resuming(sessionId, 'approval_decided', { 'cadre.approval.status': status }, async (span) => {
      const view = await this.recordDecision(session.workspace_id, sessionId, id, approved, reason, decidedBy, reach, modifier);
      // `id` may name the call (roz, kontekst): the span names the approval.
      span.setAttribute('approval_id', view.approval_id);
      return view;
    });
  }

  /** The decision itself (decideApproval checked it) and what follows it: the continuation, the call's deadline. */
  private async recordDecision(
    workspaceId: string, sessionId: string, id: string, approved: boolean, reason: string, decidedBy: string, reach: 'once' | 'session', modifier: Record<string, unknown> | undefined,
  ): Promise<SessionApprovalView> {
    let decided;
    try {
      // The continuation (when this was the last awaited call) and an approved call's deadline go through the marked
      // enqueue: a gateway that dies between the decision and either leaves the mark, and the sweeper does them.
      decided = await this.wake(sessionId, () => this.mapped(this.deps.store.decideApproval(
        sessionId, id, approved ? 'approved' : 'denied', reason || (approved ? '' : 'denied by the user'), decidedBy, reach, modifier === undefined ? '' : JSON.stringify(modifier),
      )), (d) => d.wake, (d) => afterDecision(this.deps.queue, sessionId, d));
    } catch (err) {
      if (err instanceof StoreError && err.code === 'approval_not_found') {
        // Not in the current turn: an earlier turn's record was settled when its turn ended.
        const earlier = (await this.deps.store.approvalCalls(sessionId)).find((c) => c.approval!.approval_id === id);
        if (earlier) throw new SessionEngineError('conflict', `approval ${id} is already ${earlier.approval!.status}`);
        throw new SessionEngineError('not_found', `approval ${id} not found`);
      }
      if (err instanceof StoreError && err.code === 'approval_decided') throw new SessionEngineError('conflict', err.message);
      throw err;
    }
    return approvalView(workspaceId, sessionId, decided.call);
  }

  /** A modifier fits the asked call's tool: a builtin's schema, or the client tool's as the turn offered it. */
  private async checkModifier(sessionId: string, id: string, approved: boolean, modifier: Record<string, unknown>): Promise<void> {
    if (!approved) throw invalid('a modifier amends the arguments of an approved call; a denial takes none');
    const call = (await this.deps.store.turnCalls(sessionId)).find((c) => c.approval && (c.approval.approval_id === id || c.tool_call_id === id));
    // Not asked in this turn: the decision itself answers (not found, or already decided).
    if (!call || call.approval?.status !== 'pending') return;
    const schema = call.builtin
      ? (Object.hasOwn(builtinTools, call.tool_name) ? builtinTools[call.tool_name]!.parameters : undefined)
      : (await this.deps.store.turnTools(sessionId)).find((t) => t.name === call.tool_name)?.parameters;
    if (!schema) throw invalid(`no argument schema is known for ${call.tool_name}, so its arguments cannot be amended`);
    const problem = argumentsProblem(call.tool_name, schema, modifier);
    if (problem) throw invalid(`modifier ${problem}`);
  }

  /** The session's approvals, its earlier turns' included, oldest first (a turn's in the model's order). */
  async approvals(scope: Scope, sessionId: string): Promise<SessionApprovalView[]> {
    const session = await this.get(scope, sessionId);
    return (await this.deps.store.approvalCalls(sessionId)).map((c) => approvalView(session.workspace_id, sessionId, c));
  }

  /**
   * Approvals still pending whose approval_requested lies at or before `afterSeq`: a client resuming after it
   * may have lost it, so the edge sends it again (with its original seq).
   */
  async pendingApprovals(scope: Scope, sessionId: string, afterSeq: number): Promise<{ seq: number; payload: SessionEventPayloads['approval_requested'] }[]> {
    await this.access(scope, sessionId);
    const calls = (await this.deps.store.turnCalls(sessionId)).filter((c) => c.approval?.status === 'pending');
    return calls
      .filter((c) => c.approval!.request_seq !== undefined && c.approval!.request_seq <= afterSeq)
      .map((c, i) => ({ seq: c.approval!.request_seq!, payload: requestedPayload(c, i + 1, calls.length) }));
  }

  /** roz RegisterTools: replaces the source's tools (an empty list unregisters it). */
  async registerTools(scope: Scope, sessionId: string, input: { source?: string; tools: ToolInput[]; system_context?: string }): Promise<{ tool_count: number }> {
    const source = input.source ?? '';
    const tools = clientTools(input.tools, source, 'tools');
    checkText(input.system_context ?? '', L.systemContext, 'system_context');
    await this.writeAccess(scope, sessionId);
    const count = await this.mapped(this.deps.store.registerTools(sessionId, source, tools, input.system_context ?? '', L.tools));
    return { tool_count: count };
  }

  /**
   * Aborts the running turn (model stream and tools) in whichever worker runs it; false when none ran. Steers
   * queued for it are dropped; queued follow-ups start the next turn, as after a turn that ended in error.
   */
  async cancelTurn(scope: Scope, sessionId: string, reason: string): Promise<boolean> {
    checkText(reason, L.reason, 'reason');
    await this.writeAccess(scope, sessionId);
    const ended = await this.wake(sessionId, () => this.mapped(this.deps.store.cancelTurn(sessionId, 'cancelled')), (e) => e?.wake ?? 0);
    if (ended) this.deps.turns?.turnEnded({ outcome: 'cancelled', ...turnSeconds(ended.started_at) });
    return ended !== null;
  }

  async close(scope: Scope, sessionId: string, reason: string): Promise<SessionRecord> {
    checkText(reason, L.reason, 'reason');
    await this.access(scope, sessionId);
    // A turn the close cut short ends as a cancel does (turn_complete's stop reason `cancelled`): counted as one.
    const { endedTurn } = await this.mapped(this.deps.store.closeSession(sessionId, reason));
    if (endedTurn) this.deps.turns?.turnEnded({ outcome: 'cancelled', ...turnSeconds(endedTurn.started_at) });
    return this.get(scope, sessionId);
  }

  async events(scope: Scope, sessionId: string, afterSeq: number, limit: number): Promise<{ events: SessionEvent[]; next_after_seq: number }> {
    checkSessionId(sessionId);
    const page = await this.deps.store.readEvents(sessionId, afterSeq, limit).catch(async (err: unknown) => {
      // Only the store's own refusals (a cursor error) say anything about the session; any other failure (Redis
      // failing over) goes out as it is (503), never as "not found".
      if (!(err instanceof StoreError)) throw err;
      // A cursor error must not tell another workspace's key that the session exists.
      const head = await this.deps.store.sessionHead(sessionId);
      throw head && visible(scope, head.workspace_id) ? err : notFound(sessionId);
    });
    if (!page || !visible(scope, page.workspace_id)) throw notFound(sessionId);
    this.deps.repair?.seen(sessionId, page.status, page.updated_ms);
    return { events: page.events, next_after_seq: page.events.at(-1)?.seq ?? afterSeq };
  }

  /**
   * The session's events after `afterSeq`, live, ending after session_closed; null when the reader already has
   * everything of a closed session. Any gateway serves any session: the cursor is the only state.
   */
  async watch(scope: Scope, sessionId: string, afterSeq: number): Promise<LogWatcher<SessionEvent> | null> {
    checkSessionId(sessionId);
    const head = await this.deps.store.sessionHead(sessionId);
    if (head) this.workspaces.set(sessionId, head.workspace_id);
    if (!head || !visible(scope, head.workspace_id)) throw notFound(sessionId);
    this.deps.repair?.seen(sessionId, head.status, head.updated_ms);
    if (afterSeq > head.last_seq) throw new StoreError('cursor_ahead', `after_seq ${afterSeq} is ahead of session ${sessionId}'s log (last seq ${head.last_seq})`);
    if (afterSeq === head.last_seq && head.status === 'closed') return null;
    return this.deps.fanout.watch(this.deps.store.sessionLog(sessionId), afterSeq);
  }

  /**
   * Client tool calls still waiting for a result whose tool_request lies at or before `afterSeq`: a client
   * resuming after it may have lost it, so the edge sends it again (with its original seq).
   */
  async pendingToolRequests(scope: Scope, sessionId: string, afterSeq: number): Promise<{ seq: number; payload: SessionEventPayloads['tool_request'] }[]> {
    const session = await this.deps.store.getSession(sessionId);
    if (!session || !visible(scope, session.workspace_id)) throw notFound(sessionId);
    const calls = await this.deps.store.pendingCalls(sessionId);
    return calls
      .filter((c) => c.request_seq !== undefined && c.request_seq <= afterSeq)
      .map((c) => ({
        seq: c.request_seq!,
        payload: { tool_call_id: c.tool_call_id, tool_name: c.tool_name, parameters: parseArguments(callArguments(c)), timeout_ms: c.timeout_ms },
      }));
  }

  /**
   * The enqueue sweeper's pass: changes marked before `beforeMs` whose process died before enqueueing the turn
   * they woke, or before arming a deadline (an approved call's). A session still `running` with no attempt holding
   * it gets its turn's job (the job id derives from the wake, so a job that is already there is not added twice);
   * one whose turn waits gets its pending calls' deadlines (idempotent too). Returns how many turns it enqueued.
   */
  async enqueueStranded(beforeMs: number, limit = 100): Promise<number> {
    const { store, queue } = this.deps;
    let enqueued = 0;
    for (const mark of await store.enqueueBacklog(beforeMs, limit)) {
      const sessionId = mark.split(' ')[0]!;
      const wake = await store.unclaimedWake(sessionId);
      if (wake !== null) {
        await queue.enqueueTurn(sessionId, wake);
        enqueued++;
      } else {
        await queue.armDeadlines(sessionId, await store.pendingCalls(sessionId));
      }
      await store.enqueued(mark);
    }
    return enqueued;
  }

  /** For Keepalive frames: tokens used by the current turn and the context budget. */
  async usage(sessionId: string): Promise<{ status: string; tokens_used: number; tokens_max: number } | null> {
    return this.deps.store.usage(sessionId);
  }

  /** The session's workspace, when the scope reaches it; otherwise not found. */
  private async access(scope: Scope, sessionId: string): Promise<string> {
    checkSessionId(sessionId);
    const head = await this.deps.store.sessionHead(sessionId);
    if (head) this.workspaces.set(sessionId, head.workspace_id);
    if (!head || !visible(scope, head.workspace_id)) throw notFound(sessionId);
    return head.workspace_id;
  }

  /**
   * access() for a change whose script refuses a session that is gone (session_not_found): a session this gateway
   * has seen is checked against its remembered workspace, with no read. A session's workspace never changes and
   * its id (a random UUID) names no other session, so the answer is the read's; only a session that expired since
   * is refused by the script instead (not_found all the same, after a mark written and cleared).
   */
  private async writeAccess(scope: Scope, sessionId: string): Promise<void> {
    checkSessionId(sessionId);
    const workspaceId = this.workspaces.get(sessionId);
    if (workspaceId === undefined) await this.access(scope, sessionId);
    else if (!visible(scope, workspaceId)) throw notFound(sessionId);
  }

  /**
   * Runs what answers a parked turn (a client's tool result, a decision) in a span of the turn's own trace (saved
   * with its calls), so the continuation job joins that trace; the request that brought the answer is linked.
   */
  private async resuming<T>(sessionId: string, name: string, attributes: Attributes, fn: (span: Span) => Promise<T>): Promise<T> {
    const saved = tracingEnabled() ? await this.deps.store.turnTrace(sessionId) : null;
    return inSavedTrace(saved, name, { attributes: { session_id: sessionId, ...attributes } }, fn);
  }

  private wake<T>(sessionId: string, change: () => Promise<T>, wakeOf: (result: T) => number, then?: (result: T) => Promise<void>): Promise<T> {
    return changeAndEnqueue(this.deps.store, this.deps.queue, sessionId, change, wakeOf, then);
  }

  /** Store refusals as engine errors with the codes edges map. */
  private async mapped<T>(work: Promise<T>): Promise<T> {
    try {
      return await work;
    } catch (err) {
      if (!(err instanceof StoreError)) throw err;
      switch (err.code) {
        case 'session_not_found':
          throw new SessionEngineError('not_found', 'session not found');
        case 'session_closed':
          throw new SessionEngineError('session_closed', 'the session is closed');
        case 'turn_in_progress':
          throw new SessionEngineError('turn_in_progress', 'a turn is already in progress');
        case 'tool_call_not_found':
          throw new SessionEngineError('tool_call_not_found', err.message);
        case 'tool_call_finished':
          throw new SessionEngineError('tool_call_finished', err.message);
        case 'tool_call_not_requested':
          // The approval gate: a result for a call nobody was asked to run would bypass it.
          throw new SessionEngineError('invalid_argument', err.message);
        case 'queue_full':
          throw new SessionEngineError('queue_full', `${err.message} (at most ${L.queuedInputs} per queue)`);
        case 'too_many_tools':
          throw new SessionEngineError('invalid_argument', `${err.message} (at most ${L.tools})`);
        default:
          throw err;
      }
    }
  }
}

/** The approval_requested payload of a call that waits for approval. */
export function requestedPayload(call: ClientCall, index: number, count: number): SessionEventPayloads['approval_requested'] {
  const a = call.approval!;
  return {
    approval_id: a.approval_id, tool_call_id: call.tool_call_id, tool_name: call.tool_name, arguments: call.arguments, reason: a.reason,
    timeout_secs: a.timeout_secs, expires_at: new Date(a.expires_at).toISOString(), index, count,
  };
}

export function parseArguments(raw: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(raw || '{}');
    return value && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

const OWNER = /^[A-Za-z0-9._@:-]{1,128}$/;

function checkConversation(workspaceId: string, owner: string, ref: string): void {
  if (!WORKSPACE.test(workspaceId)) throw invalid('workspace_id is invalid');
  if (!OWNER.test(owner)) throw invalid('owner must match [A-Za-z0-9._@:-]{1,128}');
  checkText(ref, 256, 'conversation_ref', true);
}

const otherOwner = (ref: string): SessionEngineError =>
  new SessionEngineError('permission_denied', `conversation_ref "${ref.slice(0, 64)}" belongs to another key`);

function checkSessionId(sessionId: string): void {
  if (!isUuid(sessionId)) throw invalid(`session_id must be a UUID, got "${sessionId.slice(0, 64)}"`);
}

const visible = (scope: Scope, workspaceId: string): boolean => scope.workspaces === 'all' || scope.workspaces === workspaceId;

const notFound = (sessionId: string): SessionEngineError => new SessionEngineError('not_found', `session ${sessionId} not found`);

import { randomUUID } from 'node:crypto';
import type { RedisClient } from './connect.ts';
import { isTerminalSessionEvent, type InputKind, type InterruptMode, type SessionEvent, type SessionEventInput, type SessionEventPayloads, type SessionStatus, type SteeringMode, type ToolOutcome } from '@cadre/protocol';
import { readHeadAndPage, type WatchableLog } from './event-fanout.ts';
import { KeyBuilder } from './keys.ts';
import { approvalDecided, checkCursor, scriptError, SCRIPT_ERRORS } from './errors.ts';
import { scriptsOf, type StoreScripts } from './scripts.ts';
import { readEntry, type StreamEntry } from './event-codec.ts';
import type { ApprovalRule, ApprovalStore } from './approval-store.ts';
import { approvalGrant } from './approval-policy.ts';
import { approvalView, type ClientCall, type ClientTool, type EndedTurn, type InputModes, type NewSession, type QueuedInput, type SessionRecord, type TurnState } from './session-types.ts';
import { DEFAULT_RETENTION_SEC } from '@cadre/config';

export interface SessionStoreOptions {
  redis: RedisClient;
  keys?: KeyBuilder;
  /** Seconds a closed session's keys (log included) are kept. */
  retentionSec?: number;
  /** Seconds an open session lives after its last turn began; its cursors stay valid that long. */
  idleTtlSec?: number;
  maxEventsPerSession?: number;
  /**
   * The workspace's approvals inbox (GET /api/approvals/stream): told of every approval a session's script asks,
   * decides or cancels, right after that script (the inbox lives in another slot). Without it, a session's
   * approvals stay in its own log.
   */
  inbox?: Pick<ApprovalStore, 'announce' | 'indexPending' | 'inboxFailed'>;
}

/** One step of a running turn, committed atomically and fenced by the attempt's lease (lua/commitTurn-4.lua). */
export interface TurnCommit {
  messages?: object[];
  calls?: ClientCall[];
  fields?: Record<string, string>;
  events?: SessionEventInput[];
}

export interface SessionEventPage {
  workspace_id: string;
  status: SessionStatus;
  /** When the session last changed (ms): its last event, or a change of its fields. */
  updated_ms: number;
  events: SessionEvent[];
}

const DEFAULT_MAX_EVENTS = 100_000;

/** Sessions: state, transcript and the ordered log, every write one Lua script on the session's slot. */
export class SessionStore {
  readonly keys: KeyBuilder;
  readonly redis: RedisClient;
  private readonly scripts: StoreScripts;
  private readonly retentionSec: number;
  private readonly idleTtlSec: number;
  private readonly maxEvents: number;
  private readonly inbox: SessionStoreOptions['inbox'];

  constructor(opts: SessionStoreOptions) {
    this.inbox = opts.inbox;
    this.redis = opts.redis;
    this.keys = opts.keys ?? new KeyBuilder();
    this.scripts = scriptsOf(opts.redis);
    this.retentionSec = opts.retentionSec ?? DEFAULT_RETENTION_SEC;
    this.idleTtlSec = opts.idleTtlSec ?? DEFAULT_RETENTION_SEC;
    this.maxEvents = opts.maxEventsPerSession ?? DEFAULT_MAX_EVENTS;
  }

  private k(sessionId: string): string[] {
    const k = this.keys.session(sessionId);
    return [k.meta, k.events, k.transcript, k.calls];
  }

  /** The lease of the session's running turn attempt, or null when no attempt holds it. */
  async turnLease(sessionId: string): Promise<string | null> {
    return this.redis.hget(this.keys.session(sessionId).meta, 'lease');
  }

  /**
   * Every key of the session: the session keys plus its steer and follow-up lists, its earlier turns' approvals and
   * its grants (the *-8 scripts, which set the expiry of all of them together).
   */
  private k8(sessionId: string): string[] {
    const k = this.keys.session(sessionId);
    return [k.meta, k.events, k.transcript, k.calls, k.steer, k.followUp, k.approvals, k.grants];
  }


  async createSession(input: NewSession): Promise<SessionRecord> {
    const sessionId = randomUUID();
    const fields = {
      session_id: sessionId,
      workspace_id: input.workspace_id,
      model: input.model,
      tools: JSON.stringify(input.tools.map((t) => JSON.stringify(t))),
      project_context: JSON.stringify(input.project_context),
      system_context: input.system_context,
      max_context_tokens: String(input.max_context_tokens),
      approval_policy: JSON.stringify(input.approval_policy),
      stop_on_denial: input.stop_on_denial ? '1' : '0',
      owner: input.owner ?? '',
    };
    const started = { session_id: sessionId, workspace_id: input.workspace_id, model: input.model };
    await this.scripts.createSession(
      ...this.k(sessionId), sessionId, JSON.stringify(fields), JSON.stringify(input.transcript.map((m) => JSON.stringify(m))),
      JSON.stringify(started), this.maxEvents, this.keys.sessionAppended(sessionId), this.idleTtlSec,
    );
    const session = await this.getSession(sessionId);
    if (!session) throw new Error(`session ${sessionId} vanished right after creation`);
    return session;
  }

  async getSession(sessionId: string): Promise<SessionRecord | null> {
    const k = this.keys.session(sessionId);
    const replies = await this.redis.multi().hgetall(k.meta).hvals(k.calls).lrange(k.steer, 0, -1).lrange(k.followUp, 0, -1).exec();
    const [[e1, meta], [e2, calls], [e3, steer], [e4, followUp]] = replies as [[Error | null, Record<string, string>], [Error | null, string[]], [Error | null, string[]], [Error | null, string[]]];
    if (e1 ?? e2 ?? e3 ?? e4) throw e1 ?? e2 ?? e3 ?? e4;
    if (!meta.session_id) return null;
    return { ...toSessionRecord(meta, parseCalls(calls)), ...inputState(meta, steer, followUp) };
  }

  /** Workspace (auth), status, last seq and when it last changed (ms) in one read; null when there is no such session. */
  async sessionHead(sessionId: string): Promise<{ workspace_id: string; status: SessionStatus; last_seq: number; updated_ms: number } | null> {
    const [workspaceId, status, seq, updated] = await this.redis.hmget(this.keys.session(sessionId).meta, 'workspace_id', 'status', 'seq', 'updated_at');
    return workspaceId && status ? { workspace_id: workspaceId, status: status as SessionStatus, last_seq: Number(seq ?? 0), updated_ms: Number(updated ?? 0) } : null;
  }

  /**
   * The wake of the session's running turn (a turn waiting on a client tool or an approval is not running) and when
   * the session last changed (ms); null when no turn runs.
   */
  async runningTurn(sessionId: string): Promise<{ wake: number; updated_ms: number } | null> {
    const [status, wake, updated] = await this.redis.hmget(this.keys.session(sessionId).meta, 'status', 'wake', 'updated_at');
    return status === 'running' && wake ? { wake: Number(wake), updated_ms: Number(updated ?? 0) } : null;
  }

  /** Starts a turn; returns the wake that names its job. Throws turn_in_progress, session_closed, session_not_found. */
  async startTurn(sessionId: string, turn: { message_id: string; content: string; tools?: ClientTool[]; system_context?: string; image_urls?: string[] }): Promise<number> {
    // With images the user message is OpenAI content parts: the text, then each image as a data URL.
    const content = turn.image_urls?.length
      ? [{ type: 'text', text: turn.content }, ...turn.image_urls.map((url) => ({ type: 'image_url', image_url: { url } }))]
      : turn.content;
    const wake = await this.scripts.startTurn(
      ...this.k8(sessionId), sessionId, turn.message_id, JSON.stringify({ role: 'user', content }),
      turn.tools ? JSON.stringify(turn.tools.map((t) => JSON.stringify(t))) : '', turn.system_context ?? '', this.maxEvents, this.keys.sessionAppended(sessionId),
    );
    if (wake < 0) throw scriptError(wake, 'user message');
    return wake;
  }

  /**
   * Marks a change that may wake a turn (start, tool result, queued input, abort with a prompt, a turn's end) before
   * it is made; the caller clears the mark once the turn's job is enqueued. A process that dies in between leaves
   * the mark for the enqueue sweeper. `mark` is `<sessionId> <nonce>`, so concurrent changes keep their own marks.
   */
  async markEnqueueing(mark: string): Promise<void> {
    await this.redis.zadd(this.keys.sessionsEnqueueing(), Date.now(), mark);
  }

  async enqueued(mark: string): Promise<void> {
    await this.redis.zrem(this.keys.sessionsEnqueueing(), mark);
  }

  /**
   * Whether a change of this session is still marked as being enqueued (its enqueue is then the sweeper's). Marks are
   * `<session id> <uuid>`: a scan of the set, which holds only the enqueues in flight.
   */
  async beingEnqueued(sessionId: string): Promise<boolean> {
    let cursor = '0';
    do {
      const [next, marks] = await this.redis.zscan(this.keys.sessionsEnqueueing(), cursor, 'MATCH', `${sessionId} *`, 'COUNT', 1000);
      if (marks.length > 0) return true;
      cursor = next;
    } while (cursor !== '0');
    return false;
  }

  /** Marks older than `beforeMs`: the sweeper's work list. */
  async enqueueBacklog(beforeMs: number, limit: number): Promise<string[]> {
    return this.redis.zrangebyscore(this.keys.sessionsEnqueueing(), '-inf', beforeMs, 'LIMIT', 0, limit);
  }

  /** The turn a job must run: its wake while the session is `running` and no attempt holds it, else null. */
  async unclaimedWake(sessionId: string): Promise<number | null> {
    const [status, wake, lease] = await this.redis.hmget(this.keys.session(sessionId).meta, 'status', 'wake', 'lease');
    return status === 'running' && !lease && wake ? Number(wake) : null;
  }

  /**
   * Whether the session's turn in progress (running or parked) is still the one `wake` named: what cancelTurn's
   * `onlyWake` would end. A read, for sweeps that would otherwise write to learn that nothing is left to end.
   */
  async turnInProgressAt(sessionId: string, wake: number): Promise<boolean> {
    const [status, current] = await this.redis.hmget(this.keys.session(sessionId).meta, 'status', 'wake');
    return (status === 'running' || status === 'waiting_tool') && current === String(wake);
  }

  /**
   * Takes the turn for a job run: 'taken', 'recovered' (a lost attempt was recorded), 'held', or 'stale'. A
   * continuation of a parked turn also takes it out of the parked index: `parkedAt` is when it parked (ms).
   */
  async claimTurn(sessionId: string, wake: number, lease: string, hostId: string): Promise<{ kind: 'taken' | 'recovered' | 'held' | 'stale'; attempt: number; parkedAt?: number }> {
    // Whether the turn is parked is read beside the claim (a park is indexed before the job that resumes it exists),
    // so a turn that never parked pays no second round trip before its model call.
    const [[code, attempt, parkedAt], parkedScore] = await Promise.all([
      this.scripts.claimTurn(...this.k(sessionId), sessionId, wake, lease, hostId, this.maxEvents, this.keys.sessionAppended(sessionId)),
      this.redis.zscore(this.keys.sessionsParked(), sessionId),
    ]);
    if (code < 0) throw scriptError(code, 'claim turn');
    const kind = code === 1 ? 'taken' : code === 2 ? 'recovered' : code === 3 ? 'held' : 'stale';
    if ((kind !== 'taken' && kind !== 'recovered') || parkedScore === null) return { kind, attempt };
    // Only the claim that takes the session out of the index reports its park, so a park is observed once.
    const unparked = await this.unpark(sessionId);
    return unparked && parkedAt ? { kind, attempt, parkedAt } : { kind, attempt };
  }

  /** The trace the current turn's client calls were made in (observability's savedTrace), or null. */
  async turnTrace(sessionId: string): Promise<string | null> {
    return this.redis.hget(this.keys.session(sessionId).meta, 'turn_trace');
  }

  /** Takes the session out of the parked index; false when it was not in it. */
  private async unpark(sessionId: string): Promise<boolean> {
    return (await this.redis.zrem(this.keys.sessionsParked(), sessionId)) === 1;
  }

  /**
   * Sessions whose turn is parked now, across the cluster (one ZCOUNT). Each entry is scored by when its session's
   * keys expire at the latest (parkTurn-8.lua's keepUntil), so a park longer than the idle TTL still counts, and an
   * entry a lost process left behind stops counting once the session itself would have expired.
   */
  async parkedCount(): Promise<number> {
    return this.redis.zcount(this.keys.sessionsParked(), Date.now(), '+inf');
  }

  /** Everything a turn step needs, in one round trip. */
  async loadTurn(sessionId: string): Promise<TurnState | null> {
    const k = this.keys.session(sessionId);
    const replies = await this.redis.multi().hgetall(k.meta).lrange(k.transcript, 0, -1).hvals(k.calls).llen(k.steer).exec();
    const [[e1, meta], [e2, transcript], [e3, calls], [e4, steers]] = replies as [[Error | null, Record<string, string>], [Error | null, string[]], [Error | null, string[]], [Error | null, number]];
    if (e1 ?? e2 ?? e3 ?? e4) throw e1 ?? e2 ?? e3 ?? e4;
    if (!meta.session_id) return null;
    const turnTools = meta.turn_tools ? parseTools(meta.turn_tools) : parseTools(meta.tools);
    return {
      session_id: meta.session_id,
      workspace_id: meta.workspace_id!,
      status: meta.status as SessionStatus,
      model: meta.model!,
      message_id: meta.message_id ?? '',
      turn: Number(meta.turn ?? 0),
      tools: turnTools,
      system_context: [meta.system_context, meta.turn_system_context].filter(Boolean).join('\n\n'),
      project_context: JSON.parse(meta.project_context ?? '[]') as string[],
      max_context_tokens: Number(meta.max_context_tokens ?? 0),
      turn_usage: JSON.parse(meta.turn_usage ?? '{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}'),
      turn_started_len: Number(meta.turn_started_len ?? 0),
      turn_started_at: Number(meta.turn_started_at ?? 0),
      alive_from: Math.max(...['turn_started_at', 'parked_at', 'kept_at'].map((f) => Number(meta[f] ?? 0))),
      idle_ttl_sec: Number(meta.ttl ?? 0),
      transcript: transcript.map((m) => JSON.parse(m) as object),
      calls: parseCalls(calls),
      approval_policy: JSON.parse(meta.approval_policy ?? '[]') as ApprovalRule[],
      stop_on_denial: meta.stop_on_denial === '1',
      steers_queued: steers,
    };
  }

  /** The current turn's client calls that still wait for a result, in the model's order. */
  async pendingCalls(sessionId: string): Promise<ClientCall[]> {
    return parseCalls(await this.redis.hvals(this.keys.session(sessionId).calls)).filter((c) => c.status === 'pending');
  }

  /** Status, the current turn's tokens and the context budget (for keepalives). */
  async usage(sessionId: string): Promise<{ status: SessionStatus; tokens_used: number; tokens_max: number } | null> {
    const [status, usage, max] = await this.redis.hmget(this.keys.session(sessionId).meta, 'status', 'turn_usage', 'max_context_tokens');
    if (!status) return null;
    const used = usage ? (JSON.parse(usage) as { total_tokens?: number }).total_tokens ?? 0 : 0;
    return { status: status as SessionStatus, tokens_used: used, tokens_max: Number(max ?? 0) };
  }

  /** Commits one step of the turn held by `lease`; returns the last seq appended. Throws lease_lost when fenced. */
  async commitTurn(sessionId: string, lease: string, step: TurnCommit): Promise<number> {
    const events = (step.events ?? []).map((e) => ({ t: e.event_type, p: JSON.stringify(e.payload) }));
    const asked = (step.calls ?? []).filter((c) => c.approval?.status === 'pending');
    // The workspace's pending index names the approvals before the script asks them, and the inbox listing finds a
    // session's pending approvals there: so it finds every one, even when this process dies right after the script
    // (before its announcement). Those the script refuses are taken out again (their ids are new, never recorded).
    const head = asked.length > 0 ? await this.inboxHead(sessionId) : null;
    const views = head ? asked.map((c) => approvalView(head.workspace_id, sessionId, c)) : [];
    if (head) await this.inbox!.indexPending(head.workspace_id, 'add', views);
    const seq = await this.scripts.commitTurn(
      ...this.k(sessionId), sessionId, lease, JSON.stringify((step.messages ?? []).map((m) => JSON.stringify(m))),
      JSON.stringify(step.calls ?? []), JSON.stringify(step.fields ?? {}), JSON.stringify(events), this.maxEvents, this.keys.sessionAppended(sessionId),
    );
    // Only a refusal is known not to have asked them. A failed call may have run the script all the same (the
    // connection lost after it): its entries stay, and the listing shows each only while its record says pending.
    if (seq < 0) {
      if (head) await this.inbox!.indexPending(head.workspace_id, 'remove', views);
      throw scriptError(seq, 'commit turn');
    }
    if (head) await this.inbox!.announce(head.workspace_id, 'approval_requested', views);
    return seq;
  }

  /**
   * Replaces the oldest `count` transcript messages with `summary`, if the transcript still has `expectedLength`
   * messages; appends context_compacted. Throws lease_lost or transcript_changed.
   */
  async compactTranscript(sessionId: string, lease: string, expectedLength: number, count: number, summary: object, payload: SessionEventPayloads['context_compacted']): Promise<number> {
    const seq = await this.scripts.compactTranscript(
      ...this.k(sessionId), sessionId, lease, expectedLength, count, JSON.stringify(summary), JSON.stringify(payload), this.maxEvents, this.keys.sessionAppended(sessionId),
    );
    if (seq < 0) throw scriptError(seq, 'compact transcript');
    return seq;
  }

  /**
   * Parks the turn on its pending client calls; false when every result is already in (carry on). The parked
   * index (cadre_sessions_parked) gets the session first, so a continuation claimed right after the park always
   * finds it there to take out; once the script has said how long the park keeps the session, the entry gets that
   * score, unless a continuation has already taken it out (XX).
   */
  async parkTurn(sessionId: string, lease: string): Promise<boolean> {
    const now = Date.now();
    const parked = this.keys.sessionsParked();
    await this.redis.multi().zadd(parked, now + this.idleTtlSec * 1000, sessionId).zremrangebyscore(parked, '-inf', `(${now}`).exec();
    const keepUntil = await this.scripts.parkTurn(...this.k8(sessionId), lease).catch(async (err: unknown) => {
      await this.unpark(sessionId);
      throw err;
    });
    if (keepUntil <= 0) await this.unpark(sessionId);
    if (keepUntil < 0) throw scriptError(keepUntil, 'park turn');
    if (keepUntil > 0) await this.redis.zadd(parked, 'XX', keepUntil, sessionId);
    return keepUntil > 0;
  }

  /**
   * Every key of the session of the turn held by `lease` expires the idle TTL from now, or later if a park already
   * keeps it longer (lua/keepSessionAlive-8.lua): a turn running longer than the idle TTL keeps its session. Throws
   * lease_lost (the turn ended or moved to another attempt) or session_not_found (never brought back).
   */
  async keepSessionAlive(sessionId: string, lease: string): Promise<void> {
    const code = await this.scripts.keepSessionAlive(...this.k8(sessionId), lease);
    if (code < 0) throw scriptError(code, 'keep session alive');
  }

  /** Settles a client call; returns the wake to enqueue when the parked turn can go on, else 0. */
  async resolveToolCall(sessionId: string, outcome: Omit<ToolOutcome, 'tool_name'>): Promise<number> {
    const wake = await this.scripts.resolveToolCall(...this.k(sessionId), sessionId, outcome.tool_call_id, JSON.stringify(outcome), this.maxEvents, this.keys.sessionAppended(sessionId));
    if (wake < 0) throw scriptError(wake, 'tool result');
    return wake;
  }

  /**
   * Decides the approval a call of the current turn waits for (by approval id or by the call's id), once.
   * Returns the call as it is now and the wake to enqueue (0: the turn still waits, or is not parked).
   * Throws approval_not_found (none in the current turn) or approval_decided (a second decision). `modifier`
   * (approved only, JSON text checked by the caller) replaces the call's arguments in the same script. Scope
   * `session` (approved only) also grants the same tool and arguments for the rest of the session, computed from
   * the call as it stands here (a call's tool and arguments never change once asked).
   */
  async decideApproval(
    sessionId: string, id: string, status: 'approved' | 'denied' | 'expired', reason: string, decidedBy: string, scope: 'once' | 'session' = 'once', modifier = '',
  ): Promise<{ call: ClientCall; wake: number }> {
    let grant = '';
    if (scope === 'session' && status === 'approved') {
      const call = (await this.turnCalls(sessionId)).find((c) => c.tool_call_id === id || c.approval?.approval_id === id);
      // The grant covers the arguments the approver let run: the amended ones when there is a modifier.
      if (call) grant = approvalGrant(call.tool_name, modifier || call.arguments);
    }
    const [code, raw] = await this.scripts.decideSessionApproval(
      ...this.k(sessionId), this.keys.session(sessionId).grants, sessionId, id, status, reason, decidedBy, this.maxEvents, this.keys.sessionAppended(sessionId), scope, grant,
      status === 'approved' ? modifier : '',
    );
    if (code === SCRIPT_ERRORS.approval_decided.code) throw approvalDecided(id, (JSON.parse(raw!) as ClientCall).approval?.status ?? 'decided');
    if (code < 0) throw scriptError(code, `approval ${id} in session ${sessionId}`);
    const call = JSON.parse(raw!) as ClientCall;
    await this.announce(sessionId, 'approval_decided', [call]);
    return { call, wake: code };
  }

  /** Which of these calls an approval for the rest of the session already covers. */
  async granted(sessionId: string, calls: readonly { tool: string; arguments: string }[]): Promise<boolean[]> {
    if (calls.length === 0) return [];
    const hits = await this.redis.smismember(this.keys.session(sessionId).grants, ...calls.map((c) => approvalGrant(c.tool, c.arguments)));
    return hits.map((h) => h === 1);
  }

  /** The client tools the current turn offers the model (its snapshot, or the session's). */
  async turnTools(sessionId: string): Promise<ClientTool[]> {
    const [turnTools, tools] = await this.redis.hmget(this.keys.session(sessionId).meta, 'turn_tools', 'tools');
    return parseTools(turnTools || tools || undefined);
  }

  /**
   * Every call of the session that asked for approval: earlier turns' (kept while the session's keys live) and the
   * current turn's, oldest first, a turn's calls in the model's order.
   */
  async approvalCalls(sessionId: string): Promise<ClientCall[]> {
    const k = this.keys.session(sessionId);
    const [earlier, current] = await Promise.all([this.redis.hvals(k.approvals), this.redis.hvals(k.calls)]);
    return [...parseCalls(earlier), ...parseCalls(current).filter((c) => c.approval)]
      .sort((a, b) => a.approval!.created_at - b.approval!.created_at || a.order - b.order);
  }

  /** The current turn's calls (approvals included), in the model's order. */
  async turnCalls(sessionId: string): Promise<ClientCall[]> {
    return parseCalls(await this.redis.hvals(this.keys.session(sessionId).calls)).sort((a, b) => a.order - b.order);
  }

  /**
   * Ends the turn in progress; null when none was. `onlyWake` limits it to that turn's job. Inputs queued behind it
   * start the next turn (a cancelled turn's steers are dropped first): `wake` names its job to enqueue, or is 0.
   */
  async cancelTurn(
    sessionId: string, stopReason: string, opts: { error?: { code: string; message: string; retryable: boolean }; onlyWake?: number } = {},
  ): Promise<(EndedTurn & { wake: number }) | null> {
    const [code, startedAt, wake] = await this.endingTurn(sessionId, () => this.scripts.cancelTurn(
      ...this.k8(sessionId), sessionId, stopReason, this.maxEvents, this.keys.sessionAppended(sessionId), this.keys.cancelChannel(),
      opts.error ? JSON.stringify(opts.error) : '', opts.onlyWake === undefined ? '' : String(opts.onlyWake),
    ));
    if (code < 0) throw scriptError(code, 'cancel turn');
    if (code !== 1) return null;
    await this.unpark(sessionId);
    return { started_at: startedAt ?? 0, wake: wake ?? 0 };
  }

  /** Closes the session (`already`: it was closed before) and ends its turn in progress, if any (`endedTurn`). */
  async closeSession(sessionId: string, reason: string): Promise<{ closed: 'closed' | 'already'; endedTurn: EndedTurn | null }> {
    const [code, turnStartedAt = -1] = await this.endingTurn(sessionId, () => this.scripts.closeSession(
      ...this.k8(sessionId), sessionId, reason, this.retentionSec, this.maxEvents, this.keys.sessionAppended(sessionId), this.keys.cancelChannel(),
    ));
    if (code < 0) throw scriptError(code, 'close session');
    if (code !== 1) return { closed: 'already', endedTurn: null };
    await this.unpark(sessionId);
    return { closed: 'closed', endedTurn: turnStartedAt >= 0 ? { started_at: turnStartedAt } : null };
  }

  /**
   * Runs a script that may end the turn (cancel, close, abort: lua endTurn cancels the turn's pending approvals)
   * and tells the inbox which approvals it cancelled: those pending before it that are cancelled after it. Every
   * path that ends a turn goes through here, whoever calls it (an edge, the engine, a worker giving up on a job).
   */
  private async endingTurn<T>(sessionId: string, end: () => Promise<T>): Promise<T> {
    if (!this.inbox) return end();
    const pendingBefore = (await this.turnCalls(sessionId)).filter((c) => c.approval?.status === 'pending');
    const out = await end();
    if (pendingBefore.length === 0) return out;
    // What the script did stands: a failed read here only leaves the inbox without the cancels (see announce).
    const after = await this.turnCalls(sessionId).catch((err: unknown) => this.inbox!.inboxFailed(err, `session ${sessionId}`));
    if (!after) return out;
    const byCall = new Map(after.map((c) => [c.tool_call_id, c]));
    const cancelled = pendingBefore.map((c): ClientCall => {
      // A prompt's new turn clears the calls: the record then ends as the cancel left it.
      const now = byCall.get(c.tool_call_id);
      return now?.approval ? now : { ...c, approval: { ...c.approval!, status: 'cancelled', decided_by: '', decided_at: Date.now() } };
    }).filter((c) => c.approval?.status === 'cancelled');
    await this.announce(sessionId, 'approval_decided', cancelled);
    return out;
  }

  /**
   * Tells the inbox after a script recorded these transitions. Never throws (ApprovalStore.announce): the turn's
   * continuation and the caller's answer follow the script, whatever became of the announcement.
   */
  private async announce(sessionId: string, type: 'approval_requested' | 'approval_decided', calls: readonly ClientCall[]): Promise<void> {
    if (calls.length === 0) return;
    const head = await this.inboxHead(sessionId);
    if (head) await this.inbox!.announce(head.workspace_id, type, calls.map((c) => approvalView(head.workspace_id, sessionId, c)));
  }

  /** The session's workspace for the inbox; null without an inbox, or when it cannot be read (reported, as announce). */
  private async inboxHead(sessionId: string): Promise<{ workspace_id: string } | null> {
    if (!this.inbox) return null;
    return (await this.sessionHead(sessionId).catch((err: unknown) => this.inbox!.inboxFailed(err, `session ${sessionId}`))) ?? null;
  }

  /** roz RegisterTools: replaces the source's tools; returns the session's client tool count. */
  async registerTools(sessionId: string, source: string, tools: ClientTool[], systemContext: string, maxTools: number): Promise<number> {
    const count = await this.scripts.registerTools(
      ...this.k(sessionId), sessionId, source, JSON.stringify(tools.map((t) => JSON.stringify(t))), systemContext, maxTools, this.maxEvents, this.keys.sessionAppended(sessionId),
    );
    if (count < 0) throw scriptError(count, 'register tools');
    return count;
  }

  /**
   * A steer or follow-up: queued while a turn is in progress (`queued` with its 1-based position), or the start
   * of a turn on an idle session (`started` with the wake to enqueue). Throws session_not_found, session_closed,
   * queue_full.
   */
  async queueInput(sessionId: string, kind: InputKind, input: { input_id: string; content: string }, maxQueued: number): Promise<{ kind: 'queued'; position: number } | { kind: 'started'; wake: number }> {
    const entry = JSON.stringify({ input_id: input.input_id, content: input.content, queued_at: new Date().toISOString() });
    const [code, value] = await this.scripts.queueInput(...this.k8(sessionId), sessionId, kind, entry, maxQueued, this.maxEvents, this.keys.sessionAppended(sessionId), this.keys.cancelChannel());
    if (code < 0) throw scriptError(code, kind === 'steer' ? 'steer' : 'follow-up');
    return code === 1 ? { kind: 'started', wake: value ?? 0 } : { kind: 'queued', position: value ?? 0 };
  }

  /** A model-turn boundary: delivers queued steering (after `before`, a cut-short answer); returns how many. */
  async deliverSteering(sessionId: string, lease: string, before: { messages?: object[]; events?: SessionEventInput[] } = {}): Promise<number> {
    const n = await this.scripts.deliverSteering(
      ...this.k8(sessionId), sessionId, lease, JSON.stringify((before.messages ?? []).map((m) => JSON.stringify(m))),
      JSON.stringify(encodeEvents(before.events)), this.maxEvents, this.keys.sessionAppended(sessionId),
    );
    if (n < 0) throw scriptError(n, 'deliver steering');
    return n;
  }

  /** Whether a steer waits that should cut a running model call short (interrupt mode `immediate`). */
  async steerWaiting(sessionId: string): Promise<boolean> {
    const k = this.keys.session(sessionId);
    const [[e1, mode], [e2, queued]] = (await this.redis.multi().hget(k.meta, 'interrupt_mode').llen(k.steer).exec()) as [[Error | null, string | null], [Error | null, number]];
    if (e1 ?? e2) throw e1 ?? e2;
    return mode !== 'wait' && queued > 0;
  }

  /**
   * The turn's last step (lua/finishTurn-8.lua): `continue` when steering arrived and the turn goes on, else the
   * turn ended and `next` is the wake of the turn queued inputs started (0 = none).
   */
  async finishTurn(sessionId: string, lease: string, step: TurnCommit, stopReason: string): Promise<{ kind: 'continue' } | { kind: 'ended'; next: number }> {
    const [code, wake] = await this.scripts.finishTurn(
      ...this.k8(sessionId), sessionId, lease, JSON.stringify((step.messages ?? []).map((m) => JSON.stringify(m))),
      JSON.stringify(step.fields ?? {}), JSON.stringify(encodeEvents(step.events)), stopReason, this.maxEvents, this.keys.sessionAppended(sessionId),
    );
    if (code < 0) throw scriptError(code, 'finish turn');
    return code === 2 ? { kind: 'continue' } : { kind: 'ended', next: wake ?? 0 };
  }

  /** abort / abort_and_prompt: drops the queues, ends the turn, and with a prompt starts the next one. */
  async abortTurn(sessionId: string, prompt?: { message_id: string; content: string }): Promise<{ endedTurn: EndedTurn | null; dropped: number; wake: number }> {
    const [code, dropped, wake, startedAt = -1] = await this.endingTurn(sessionId, () => this.scripts.abortTurn(
      ...this.k8(sessionId), sessionId, this.maxEvents, this.keys.sessionAppended(sessionId), this.keys.cancelChannel(), prompt?.message_id ?? '', prompt?.content ?? '',
    ));
    if (code < 0) throw scriptError(code, 'abort');
    if (code === 1) await this.unpark(sessionId);
    return { endedTurn: code === 1 && startedAt >= 0 ? { started_at: startedAt } : null, dropped: dropped ?? 0, wake: wake ?? 0 };
  }

  /**
   * Binds `ref` to `sessionId` for `owner` (first wins; `replace` only replaces the owner's own binding, and so does
   * `gone`, the session the owner's binding names and that no longer exists); returns the binding afterwards, which
   * names another owner when the ref is someone else's.
   */
  async bindConversation(workspaceId: string, owner: string, ref: string, sessionId: string, replace: boolean, gone = ''): Promise<ConversationBinding> {
    return parseBinding(await this.scripts.bindConversation(this.keys.conversations(workspaceId), ref, owner, sessionId, replace ? '1' : '0', this.idleTtlSec, gone))!;
  }

  /**
   * The ref's binding. A lookup keeps the workspace's bindings another idle TTL, as a new binding does: a
   * conversation in use keeps its binding as long as its session (whose TTL its turns renew).
   */
  async conversationSession(workspaceId: string, ref: string): Promise<ConversationBinding | null> {
    const key = this.keys.conversations(workspaceId);
    const [[err, value]] = (await this.redis.multi().hget(key, ref).expire(key, this.idleTtlSec).exec()) as [[Error | null, string | null]];
    if (err) throw err;
    return parseBinding(value);
  }

  async setInputModes(sessionId: string, modes: InputModes): Promise<void> {
    const code = await this.scripts.setSessionFields(this.keys.session(sessionId).meta, JSON.stringify(modes));
    if (code < 0) throw scriptError(code, 'set modes');
  }

  /** The model of an open session; the running turn's next model call uses it. */
  async setModel(sessionId: string, model: string): Promise<void> {
    const code = await this.scripts.setSessionFields(this.keys.session(sessionId).meta, JSON.stringify({ model }));
    if (code < 0) throw scriptError(code, 'set model');
  }

  /** The conversation as chat messages (the transcript list), oldest first. */
  async transcript(sessionId: string): Promise<object[]> {
    return (await this.redis.lrange(this.keys.session(sessionId).transcript, 0, -1)).map((m) => JSON.parse(m) as object);
  }

  /** Events after `afterSeq` with the session's workspace and status from the same round trip; cursor errors throw. */
  async readEvents(sessionId: string, afterSeq: number, limit: number): Promise<SessionEventPage | null> {
    const k = this.keys.session(sessionId);
    const replies = await this.redis.multi().hmget(k.meta, 'workspace_id', 'status', 'seq', 'updated_at').xrange(k.events, `(${afterSeq}-0`, '+', 'COUNT', limit).exec();
    const [[metaErr, meta], [rangeErr, entries]] = replies as [[Error | null, (string | null)[]], [Error | null, StreamEntry[]]];
    if (metaErr ?? rangeErr) throw metaErr ?? rangeErr;
    const [workspaceId, status, seq, updated] = meta;
    if (!workspaceId || !status) return null;
    const events = entries.map(decodeSessionEntry);
    checkCursor(afterSeq, Number(seq ?? 0), events[0]?.seq, 'session');
    return { workspace_id: workspaceId, status: status as SessionStatus, updated_ms: Number(updated ?? 0), events };
  }

  /** The session's log as the fan-out reads it; its id is the session id (what the scripts publish). */
  sessionLog(sessionId: string): WatchableLog<SessionEvent> {
    const events = this.keys.session(sessionId).events;
    return {
      id: sessionId,
      channel: this.keys.sessionAppended(sessionId),
      decode: decodeSessionEntry,
      read: async (afterSeq, limit) => (await this.readEvents(sessionId, afterSeq, limit))?.events ?? null,
      readLive: async (afterSeq, limit) => ((await this.redis.xrange(events, `(${afterSeq}-0`, '+', 'COUNT', limit)) as StreamEntry[]).map(decodeSessionEntry),
      head: async () => Number((await this.redis.hget(this.keys.session(sessionId).meta, 'seq')) ?? 0),
      headAndPage: (afterSeq, limit) => readHeadAndPage(this.redis, this.keys.session(sessionId).meta, events, decodeSessionEntry, afterSeq, limit),
      isTerminal: (event) => isTerminalSessionEvent(event.event_type),
    };
  }
}

/** A session log entry (lua/includes/session-log.lua): type, time and payload only. */
export function decodeSessionEntry(entry: StreamEntry): SessionEvent {
  const { fields: _fields, ...event } = readEntry(entry);
  return event as SessionEvent;
}

/** A conversation ref's binding: the session and the key (owner) that bound it. */
export interface ConversationBinding {
  owner: string;
  session_id: string;
}

function parseBinding(value: string | null): ConversationBinding | null {
  if (!value) return null;
  const space = value.lastIndexOf(' ');
  return { owner: value.slice(0, space), session_id: value.slice(space + 1) };
}

function encodeEvents(events: SessionEventInput[] | undefined): { t: string; p: string }[] {
  return (events ?? []).map((e) => ({ t: e.event_type, p: JSON.stringify(e.payload) }));
}

function inputState(meta: Record<string, string>, steer: string[], followUp: string[]): Pick<SessionRecord, 'steering_mode' | 'follow_up_mode' | 'interrupt_mode' | 'queued_steering' | 'queued_follow_ups'> {
  return {
    steering_mode: (meta.steering_mode || 'one-at-a-time') as SteeringMode,
    follow_up_mode: (meta.follow_up_mode || 'one-at-a-time') as SteeringMode,
    interrupt_mode: (meta.interrupt_mode || 'immediate') as InterruptMode,
    queued_steering: steer.map((e) => JSON.parse(e) as QueuedInput),
    queued_follow_ups: followUp.map((e) => JSON.parse(e) as QueuedInput),
  };
}

function parseTools(raw: string | undefined): ClientTool[] {
  return (JSON.parse(raw ?? '[]') as string[]).map((t) => JSON.parse(t) as ClientTool);
}

function parseCalls(raw: string[]): ClientCall[] {
  return raw.map((c) => JSON.parse(c) as ClientCall).sort((a, b) => a.order - b.order);
}

const iso = (ms: string | undefined): string => new Date(Number(ms ?? 0)).toISOString();

function toSessionRecord(meta: Record<string, string>, calls: ClientCall[]): Omit<SessionRecord, keyof ReturnType<typeof inputState>> {
  return {
    session_id: meta.session_id!,
    workspace_id: meta.workspace_id!,
    status: meta.status as SessionStatus,
    model: meta.model!,
    tools: parseTools(meta.tools),
    project_context: JSON.parse(meta.project_context ?? '[]') as string[],
    system_context: meta.system_context ?? '',
    max_context_tokens: Number(meta.max_context_tokens ?? 0),
    turn: Number(meta.turn ?? 0),
    message_id: meta.message_id || null,
    pending_tool_calls: calls
      .filter((c) => c.status === 'pending')
      .map((c) => ({ tool_call_id: c.tool_call_id, tool_name: c.tool_name, deadline: new Date(c.deadline_ms).toISOString() })),
    created_at: iso(meta.created_at),
    updated_at: iso(meta.updated_at),
    closed_reason: meta.closed_reason || null,
    last_seq: Number(meta.seq ?? 0),
    owner: meta.owner || null,
  };
}

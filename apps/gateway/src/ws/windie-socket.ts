import { EventEmitter } from 'node:events';
import type { WebSocket } from 'ws';
import { emptyAnswer } from '@cadre/board';
import type { Logger } from '@cadre/observability';
import type { SessionEvent } from '@cadre/protocol';
import { SessionEngineError, clientTools, type SessionEngine, type ToolInput } from '@cadre/session';
import { WatchClosedError, sessionOfApproval, type LogWatcher } from '@cadre/store';
import { ApiError, GATEWAY_SHUTTING_DOWN } from '../errors.ts';
import type { Authenticator, Principal } from '../auth.ts';
import { keyName } from '../approvals/approval-service.ts';
import { writable } from '../streams/writable.ts';
import { RequestInbox } from './request-inbox.ts';
import {
  WindieProtocolError, checkPayload, decodeRequestId, parseEnvelope, parseHandshake, serverMessage, toServerMessages,
  type Envelope, type ManifestTool,
} from './windie-messages.ts';

/** Providers one connection's update-settings may name (their presence is kept for load-settings). */
const MAX_PROVIDERS = 32;

export interface WindieSocketDeps {
  sessions: SessionEngine;
  auth: Authenticator;
  logger: Logger;
  /** Models a client may choose with update-settings; the first is the default. */
  models: string[];
  /** Workspace of sockets whose key reaches every workspace. */
  defaultWorkspace: string;
  handshakeTimeoutMs?: number;
}

const POLICY_VIOLATION = 1008;
/** RFC 6455 "going away": the gateway drains; the client reconnects (to another gateway) and goes on. */
export const GOING_AWAY = 1001;
/** "Try again later": the client stopped reading while its conversations streamed; it reconnects and goes on. */
export const TRY_AGAIN_LATER = 1013;
/**
 * What the socket may hold that its client has not taken yet (as a stream's high-water mark): past it, the
 * conversations' watchers stop handing over events, which wait in their bounded buffers, and no request is answered.
 */
const MAX_BUFFERED_BYTES = 64 * 1024;
/**
 * Requests a socket may have queued for handling (one is handled at a time), and their characters (each may be
 * 10 MB, ws's maxPayload): past either the socket is paused — ws stops reading it, so TCP holds the client's writes
 * back — and resumed once they are handled, as a gRPC call is. The rest of the read that reached the cap waits as
 * its text (RequestInbox), so a socket holds at most these plus one read's bytes (64 KiB).
 */
const MAX_PENDING_MESSAGES = 32;
const MAX_PENDING_CHARS = 32 * 1024 * 1024;
// Parts of WindieOS that live on the desktop or in its own services, not in an agent runtime.
const OUTSIDE_CADRE: Record<string, string> = {
  'wakeword-detected': 'wakeword detection',
  'audio-chunk': 'audio',
  'transcription': 'transcription',
  'start-transcription': 'transcription',
  'screenshot': 'screenshots',
};

interface Settings {
  selected_model_id: string;
  interaction_mode: string;
  provider_api_keys: Record<string, { enabled: boolean; has_key: boolean }>;
}

/**
 * One /ws connection: the handshake, then envelopes. Conversations are sessions of the engine, named by
 * `conversation_ref` (bound in Redis per user), so a socket that reconnects — to any gateway — continues them.
 */
export class WindieSocket {
  private readonly deps: WindieSocketDeps;
  private readonly socket: WebSocket;
  private principal: Principal | null = null;
  private workspace = '';
  /** The authenticated key the socket's conversations belong to (the handshake's user_id is only a claim). */
  private owner = '';
  private tools: ToolInput[] = [];
  private readonly settings: Settings;
  private readonly watchers = new Map<string, LogWatcher<SessionEvent>>();
  private readonly inbox: RequestInbox;
  /** 'drain' once the socket holds less than MAX_BUFFERED_BYTES again (ws has no such event), 'close' when it ends. */
  private readonly outbox = new EventEmitter();
  private handshaken = false;
  private closed = false;
  private readonly handshakeTimer: NodeJS.Timeout;

  /** `onRefused`: the handshake's key was refused (the socket is closed 1008 with the reason). */
  constructor(deps: WindieSocketDeps, socket: WebSocket, authorization: string | undefined, onRefused?: (err: ApiError) => void) {
    this.deps = deps;
    this.socket = socket;
    this.settings = { selected_model_id: deps.models[0]!, interaction_mode: 'agent', provider_api_keys: {} };
    try {
      this.principal = deps.auth.authenticate(authorization);
    } catch (err) {
      if (err instanceof ApiError) onRefused?.(err);
      this.close(POLICY_VIOLATION, err instanceof ApiError ? err.message : 'unauthenticated');
    }
    this.handshakeTimer = setTimeout(() => this.close(POLICY_VIOLATION, 'no handshake'), deps.handshakeTimeoutMs ?? 10_000);
    // One message at a time, in order: a rehydrate must be bound before the query after it looks it up. A client
    // that sends faster than it is answered (a reconnect's queries and rehydrates) is read no further.
    this.inbox = new RequestInbox({
      maxQueued: MAX_PENDING_MESSAGES,
      maxChars: MAX_PENDING_CHARS,
      // A client that does not read its answers is not answered further until it does.
      handle: (raw) => this.room().then(() => this.onMessage(raw)),
      onError: (err) => this.deps.logger.error({ err }, 'ws message failed'),
      pause: () => socket.pause(),
      resume: () => socket.resume(),
    });
    socket.on('message', (data, isBinary) => {
      if (!this.closed) this.inbox.offer(isBinary ? null : data.toString());
    });
    socket.on('close', () => this.stop());
    socket.on('error', () => this.stop());
  }

  private async onMessage(raw: string | null): Promise<void> {
    if (this.closed) return;
    if (!this.handshaken) {
      try {
        if (raw === null) throw new WindieProtocolError('the handshake must be a text frame');
        this.handshake(raw);
      } catch (err) {
        this.close(POLICY_VIOLATION, err instanceof Error ? err.message.slice(0, 120) : 'invalid handshake');
      }
      return;
    }
    let envelope: Envelope;
    try {
      if (raw === null) throw new WindieProtocolError('binary frames are not part of this protocol (audio is outside Cadre)');
      envelope = parseEnvelope(raw);
    } catch (err) {
      this.send(serverMessage('error', { message: (err as Error).message }));
      return;
    }
    try {
      await this.handle(envelope);
    } catch (err) {
      this.send(serverMessage('error', { message: errorText(err) }));
      if (!(err instanceof WindieProtocolError || err instanceof SessionEngineError)) this.deps.logger.error({ err, type: envelope.type }, 'ws message failed');
    }
  }

  private handshake(raw: string): void {
    const hs = parseHandshake(raw);
    clearTimeout(this.handshakeTimer);
    const principal = this.principal!;
    this.workspace = principal.workspaces === 'all' ? this.deps.defaultWorkspace : principal.workspaces;
    this.owner = keyName(principal);
    if (hs.user_id !== undefined && !/^[A-Za-z0-9._@:-]{1,128}$/.test(hs.user_id)) throw new WindieProtocolError('user_id must match [A-Za-z0-9._@:-]{1,128}');
    this.handshaken = true;
    if (hs.manifest) this.send(serverMessage('client-tool-manifest', this.acceptManifest(hs.manifest)));
  }

  /** Each manifest tool is judged alone: a bad one is rejected with its reason, the rest are offered to the model. */
  private acceptManifest(manifest: ManifestTool[]): { accepted: object[]; rejected: object[] } {
    const accepted: object[] = [];
    const rejected: object[] = [];
    for (const tool of manifest) {
      const input: ToolInput = { name: tool.name, description: tool.description ?? '', parameters: tool.schema ?? {} };
      try {
        clientTools([...this.tools, input], '', 'client_manifest.tools');
        this.tools.push(input);
        accepted.push({ name: tool.name, description: input.description, execution_target: tool.execution_target ?? 'local_runtime' });
      } catch (err) {
        rejected.push({ name: tool.name, reason: (err as Error).message.replace(/^client_manifest\.tools\[\d+\]\.?/, '') });
      }
    }
    return { accepted, rejected };
  }

  private async handle(msg: Envelope): Promise<void> {
    const { sessions } = this.deps;
    const scope = this.principal!;
    const p = msg.payload;
    switch (msg.type) {
      case 'query': {
        checkPayload('query', p, ['text', 'conversation_ref', 'content', 'screenshot_ref', 'screenshot_refs', 'system_state_internal', 'query_context'], ['text', 'conversation_ref']);
        if (p.screenshot_ref || (Array.isArray(p.screenshot_refs) && p.screenshot_refs.length > 0)) {
          throw new WindieProtocolError('screenshots are outside Cadre: send the query without screenshot_ref / screenshot_refs');
        }
        const text = stringField('query', p, 'text');
        const sessionId = await this.conversation(stringField('query', p, 'conversation_ref'));
        try {
          await this.attach(sessionId);
          await sessions.sendMessage(scope, sessionId, { content: text, message_id: msg.id, ...(this.tools.length > 0 && { tools: this.tools }) });
        } catch (err) {
          if (!(err instanceof SessionEngineError) || err.code !== 'turn_in_progress') throw err;
          // A query while the conversation's turn still runs (a reconnected socket): it runs after it.
          await sessions.queueInput(scope, sessionId, 'follow_up', { content: text, input_id: msg.id });
        }
        return;
      }
      case 'tool-result': {
        checkPayload('tool-result', p, ['request_id', 'success', 'data', 'error'], ['request_id', 'success']);
        if (typeof p.success !== 'boolean') throw new WindieProtocolError('tool-result: payload.success must be a boolean');
        const { sessionId, toolCallId } = decodeRequestId(stringField('tool-result', p, 'request_id'));
        const data = (p.data ?? {}) as { output?: unknown; screenshot?: unknown; screenshot_ref?: unknown };
        if (data.screenshot || data.screenshot_ref) throw new WindieProtocolError('tool-result: screenshots are outside Cadre; send data.output only');
        const output = typeof data.output === 'string' ? data.output : data.output === undefined ? '' : JSON.stringify(data.output);
        const result = p.success ? output : typeof p.error === 'string' && p.error ? p.error : output || 'the tool failed';
        await this.attach(sessionId);
        await sessions.submitToolResult(scope, sessionId, { tool_call_id: toolCallId, success: p.success, result });
        return;
      }
      case 'approval-response': {
        // Cadre's answer to an approval-request (WindieOS has no approval messages): request_id is the approval id.
        checkPayload('approval-response', p, ['request_id', 'approved', 'reason', 'modifier'], ['request_id', 'approved']);
        if (typeof p.approved !== 'boolean') throw new WindieProtocolError('approval-response: payload.approved must be a boolean');
        if (p.reason !== undefined && typeof p.reason !== 'string') throw new WindieProtocolError('approval-response: payload.reason must be a string');
        const modifier = p.modifier ?? undefined;
        if (modifier !== undefined && (typeof modifier !== 'object' || Array.isArray(modifier))) throw new WindieProtocolError('approval-response: payload.modifier must be an object (the amended parameters)');
        const approvalId = stringField('approval-response', p, 'request_id');
        const sessionId = sessionOfApproval(approvalId);
        if (!sessionId) throw new WindieProtocolError(`approval-response: unknown request_id "${approvalId.slice(0, 64)}"`);
        await this.attach(sessionId);
        // A modifier amends the call's parameters; the engine checks it against the tool's schema (a refusal is an error, the approval stays pending).
        await sessions.decideApproval(
          scope, sessionId, approvalId, p.approved, (p.reason as string | undefined) ?? (p.approved ? '' : 'denied by the user'), keyName(scope), 'once', modifier as Record<string, unknown> | undefined,
        );
        return;
      }
      case 'tool-bundle-result':
        throw new WindieProtocolError('tool-bundle-result: no tool bundle is pending (Cadre sends client tools one tool-call at a time)');
      case 'rehydrate-conversation': {
        checkPayload('rehydrate-conversation', p, ['conversation_ref', 'messages', 'rehydrate_mode', 'workspace_path', 'repo_instruction_messages'], ['conversation_ref', 'messages']);
        if (p.rehydrate_mode !== undefined && p.rehydrate_mode !== 'replace') throw new WindieProtocolError('rehydrate-conversation: only rehydrate_mode "replace" is supported');
        if (!Array.isArray(p.messages)) throw new WindieProtocolError('rehydrate-conversation: payload.messages must be an array');
        const history = p.messages.map((m: unknown, i) => historyEntry(m, i));
        const ref = stringField('rehydrate-conversation', p, 'conversation_ref');
        const session = await sessions.create(scope, { workspace_id: this.workspace, model: this.settings.selected_model_id, history, tools: this.tools, owner: this.owner });
        await sessions.bindConversation(scope, this.owner, ref, session, true);
        return;
      }
      case 'load-settings':
        checkPayload('load-settings', p, [], []);
        this.send(serverMessage('settings-loaded', { config: this.publicSettings() }));
        return;
      case 'update-settings':
        this.send(serverMessage('settings-updated', { updated_keys: this.updateSettings(p) }));
        return;
      case 'list-models':
        checkPayload('list-models', p, [], []);
        this.send(serverMessage('models-listed', {
          local: [],
          online: this.deps.models.map((id) => ({ id, provider: 'openai', runtime_model_id: id, display_name: id, default_model_id: this.deps.models[0] })),
        }));
        return;
      default: {
        const outside = OUTSIDE_CADRE[msg.type];
        if (outside) throw new WindieProtocolError(`${msg.type}: ${outside} are outside Cadre (an agent runtime); this message is not handled here`);
        throw new WindieProtocolError(`unknown message type "${msg.type.slice(0, 64)}"`);
      }
    }
  }

  private updateSettings(p: Record<string, unknown>): string[] {
    const known = ['model_mode', 'model_provider', 'selected_model_id', 'interaction_mode', 'speech_mode_enabled', 'wakeword_enabled', 'wakeword_stt_enabled', 'browser_automation_enabled', 'include_query_screenshot', 'provider_api_keys'];
    checkPayload('update-settings', p, known, []);
    if (p.selected_model_id !== undefined && !this.deps.models.includes(p.selected_model_id as string)) {
      throw new WindieProtocolError(`update-settings: selected_model_id must be one of the configured models (${this.deps.models.join(', ')})`);
    }
    if (p.model_mode !== undefined && p.model_mode !== 'online') throw new WindieProtocolError('update-settings: model_mode "local" is outside Cadre (only "online" models)');
    if (p.interaction_mode !== undefined && p.interaction_mode !== 'chat' && p.interaction_mode !== 'agent') throw new WindieProtocolError('update-settings: interaction_mode must be "chat" or "agent"');
    const keys = p.provider_api_keys;
    if (keys !== undefined && (typeof keys !== 'object' || keys === null || Array.isArray(keys))) throw new WindieProtocolError('update-settings: provider_api_keys must be an object');
    // What a socket keeps of them is bounded: the providers it has named, each once.
    const providers = new Set([...Object.keys(this.settings.provider_api_keys), ...Object.keys(keys ?? {}).map((k) => k.slice(0, 64))]);
    if (providers.size > MAX_PROVIDERS) throw new WindieProtocolError(`update-settings: provider_api_keys may name at most ${MAX_PROVIDERS} providers on one connection`);
    if (p.selected_model_id !== undefined) this.settings.selected_model_id = p.selected_model_id as string;
    if (p.interaction_mode !== undefined) this.settings.interaction_mode = p.interaction_mode as string;
    // Provider keys are never kept: the gateway's model server holds its own credentials. Only their presence is.
    for (const [provider, entry] of Object.entries((keys ?? {}) as Record<string, { enabled?: unknown; api_key?: unknown }>)) {
      this.settings.provider_api_keys[provider.slice(0, 64)] = { enabled: entry?.enabled !== false, has_key: typeof entry?.api_key === 'string' && entry.api_key !== '' };
    }
    return Object.keys(p);
  }

  private publicSettings(): Record<string, unknown> {
    return {
      model_mode: 'online', model_provider: 'openai', selected_model_id: this.settings.selected_model_id, interaction_mode: this.settings.interaction_mode,
      speech_mode_enabled: false, wakeword_enabled: false, wakeword_stt_enabled: false, browser_automation_enabled: false, include_query_screenshot: false,
      provider_api_keys: Object.fromEntries(Object.entries(this.settings.provider_api_keys).map(([k, v]) => [k, { enabled: v.enabled, api_key: '' }])),
    };
  }

  /**
   * The session of a conversation ref; a new ref starts one (the first binder wins a race), and so does a ref whose
   * session expired, as the WindieOS server starts a session for any conversation it does not hold (the client can
   * rehydrate it).
   */
  private async conversation(ref: string): Promise<string> {
    const { sessions } = this.deps;
    const scope = this.principal!;
    const bound = await sessions.conversationSession(scope, this.workspace, this.owner, ref);
    if (bound && !bound.gone) return bound.session_id;
    const session = await sessions.create(scope, { workspace_id: this.workspace, model: this.settings.selected_model_id, tools: this.tools, owner: this.owner });
    return sessions.bindConversation(scope, this.owner, ref, session, false, bound?.session_id);
  }

  /**
   * Streams the session's events from now on to this socket (once per session). Tool calls and approvals still
   * waiting for a client are sent again: a reconnected socket may have lost them.
   */
  private async attach(sessionId: string): Promise<void> {
    if (this.watchers.has(sessionId)) return;
    const scope = this.principal!;
    const head = (await this.deps.sessions.owned(scope, this.owner, sessionId)).last_seq;
    const watcher = await this.deps.sessions.watch(scope, sessionId, head);
    if (!watcher) return;
    if (this.closed) return void watcher.return();
    this.watchers.set(sessionId, watcher);
    const answer = emptyAnswer();
    for (const pending of await this.deps.sessions.pendingToolRequests(scope, sessionId, head)) {
      for (const m of toServerMessages(sessionId, { seq: pending.seq, timestamp: '', event_type: 'tool_request', payload: pending.payload }, answer)) this.send(m);
    }
    for (const pending of await this.deps.sessions.pendingApprovals(scope, sessionId, head)) {
      for (const m of toServerMessages(sessionId, { seq: pending.seq, timestamp: '', event_type: 'approval_requested', payload: pending.payload }, answer)) this.send(m);
    }
    void (async () => {
      try {
        // While the socket is full the watcher holds the events (a bounded buffer), as gRPC and SSE streams do.
        await watcher.pipeTo((event) => this.sendAll(toServerMessages(sessionId, event, answer)), () => writable(this.outbox, 'close', { watcher }));
      } catch (err) {
        // The gateway drains: the socket goes away (the turn goes on on the workers) rather than report an error.
        if (err instanceof WatchClosedError && err.code === 'shutting_down') return this.close(GOING_AWAY, GATEWAY_SHUTTING_DOWN);
        // The client stopped reading: the socket is the bottleneck of all its conversations, so it goes; told why
        // after what it holds, it reconnects and queries the ref (what it missed is in the session's messages).
        if (err instanceof WatchClosedError && err.code === 'watcher_overflow') {
          this.send(serverMessage('error', {
            message: `this socket fell too far behind (its client stopped reading): reconnect and send a query on the conversation_ref; what it missed is in GET /api/sessions/${sessionId}/messages`,
          }));
          return this.close(TRY_AGAIN_LATER, 'fell too far behind: reconnect and query the conversation_ref');
        }
        // Anything else (the session's log gone) is told as an error; the socket stays for other conversations.
        this.send(serverMessage('error', { message: `the conversation's stream ended: ${errorText(err)}` }));
      } finally {
        this.watchers.delete(sessionId);
      }
    })();
  }

  /** Sends; false once the socket holds MAX_BUFFERED_BYTES or more that its client has not taken yet. */
  private send(message: string): boolean {
    if (this.closed || this.socket.readyState !== this.socket.OPEN) return true;
    this.socket.send(message, this.sent);
    return this.socket.bufferedAmount < MAX_BUFFERED_BYTES;
  }

  private sendAll(messages: string[]): boolean {
    let room = true;
    for (const message of messages) room = this.send(message);
    return room;
  }

  /** Each send's callback (the frame went to the network, or the socket failed) stands in for the 'drain' ws lacks. */
  private readonly sent = (): void => {
    if (this.socket.bufferedAmount < MAX_BUFFERED_BYTES) this.outbox.emit('drain');
  };

  /** Resolves once the socket holds less than MAX_BUFFERED_BYTES, or has ended. */
  private room(): Promise<void> {
    if (this.closed || this.socket.bufferedAmount < MAX_BUFFERED_BYTES) return Promise.resolve();
    return writable(this.outbox, 'close');
  }

  private close(code: number, reason: string): void {
    if (this.closed) return;
    this.socket.close(code, reason);
    this.stop();
  }

  private stop(): void {
    this.closed = true;
    this.outbox.emit('close');
    clearTimeout(this.handshakeTimer);
    for (const watcher of this.watchers.values()) void watcher.return();
    this.watchers.clear();
  }
}

function stringField(type: string, p: Record<string, unknown>, key: string): string {
  const value = p[key];
  if (typeof value !== 'string' || value === '') throw new WindieProtocolError(`${type}: payload.${key} must be a non-empty string`);
  return value;
}

function historyEntry(m: unknown, i: number): { role: 'user' | 'assistant'; content: string } {
  const entry = m as { role?: unknown; content?: unknown; tool_name?: unknown };
  if (typeof entry !== 'object' || entry === null || typeof entry.content !== 'string') throw new WindieProtocolError(`rehydrate-conversation: messages[${i}] needs a string content`);
  if (entry.role === 'user' || entry.role === 'assistant') return { role: entry.role, content: entry.content };
  // A tool entry has no call to answer in a fresh transcript: it is kept as what the assistant saw.
  if (entry.role === 'tool') return { role: 'assistant', content: `[${typeof entry.tool_name === 'string' ? entry.tool_name : 'tool'} output] ${entry.content}` };
  throw new WindieProtocolError(`rehydrate-conversation: messages[${i}].role must be user, assistant or tool`);
}

function errorText(err: unknown): string {
  if (err instanceof WindieProtocolError || err instanceof SessionEngineError || err instanceof ApiError || err instanceof WatchClosedError) return err.message;
  return 'internal error';
}

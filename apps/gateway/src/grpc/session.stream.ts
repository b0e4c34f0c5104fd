import type * as grpc from '@grpc/grpc-js';
import { inOwnTrace, type Logger } from '@cadre/observability';
import type { SessionRequest, SessionResponse } from '@cadre/protocol';
import { SessionEngineError, type SessionEngine } from '@cadre/session';
import type { Authenticator } from '../auth.ts';
import { keyName } from '../approvals/approval-service.ts';
import { toApiError } from '../errors.ts';
import { writable } from '../streams/writable.ts';
import { BidiSessionCall, type BidiCallDeps } from './bidi-session-call.ts';
import { metadataValue } from './metadata.ts';
import { sessionError, startInput, toolInputs, toolRequest, toSessionResponse } from './session-frames.ts';

export interface SessionStreamDeps extends BidiCallDeps {
  auth: Authenticator;
  sessions: SessionEngine;
  /** Keepalive period during a turn (roz: 15 s). */
  keepaliveMs: number;
}

type Call = grpc.ServerDuplexStream<SessionRequest, SessionResponse>;

/** roz StreamSession: one bidi call is one client's view of one session; the session itself lives in the engine. */
export function streamSession(deps: SessionStreamDeps): (call: Call) => void {
  return (call) => new StreamSessionCall(deps, call).open();
}

/**
 * Requests are handled one at a time in arrival order (a UserMessage right after StartSession waits for the
 * session to exist). Responses come from the session's log through the shared fan-out, so any gateway serves any
 * session and a resumed call sees exactly what it missed.
 */
class StreamSessionCall extends BidiSessionCall<SessionRequest, SessionResponse, SessionStreamDeps> {
  private keepalive: NodeJS.Timeout | undefined;
  private halfClosed = false;

  constructor(deps: SessionStreamDeps, call: Call) {
    super(deps, call, 'StreamSession');
  }

  open(): void {
    this.listen();
    // The client half-closed (e.g. `buf curl` after its last message): the call ends once the turn in progress
    // has ended or waits for a client tool this client can no longer answer. The session lives on either way.
    this.call.on('end', () => void this.chain.then(() => this.halfClose()));
    this.call.on('cancelled', () => this.stop());
  }

  protected async handle(request: SessionRequest): Promise<void> {
    if (this.done) return;
    const r = request.request;
    if (this.sessionId === undefined) {
      if (r?.$case !== 'start') {
        return this.fail(new SessionEngineError('invalid_argument', 'the first message of a session must be start (StartSession)'));
      }
      this.principal = this.deps.auth.authenticate(metadataValue(this.call.metadata, 'authorization'));
      const start = r.value;
      let afterSeq = 0;
      if (start.sessionId) {
        afterSeq = start.afterSeq;
        // Checks access and the cursor before anything is sent.
        if (!this.adopt(await this.deps.sessions.watch(this.principal, start.sessionId, afterSeq))) return;
        this.sessionId = start.sessionId;
      } else {
        const session = await this.deps.sessions.create(this.principal, startInput(start));
        this.sessionId = session.session_id;
        if (!this.adopt(await this.deps.sessions.watch(this.principal, this.sessionId, 0))) return;
      }
      void this.pump(afterSeq);
      this.scheduleKeepalive();
      return;
    }
    const scope = this.principal!;
    const sid = this.sessionId;
    try {
      switch (r?.$case) {
        case 'start':
          return this.send(sessionError('already_started', 'the session is already started on this stream'));
        case 'userMessage': {
          const m = r.value;
          // Text blocks join the message; binary blocks are images the model sees (the engine checks type and size).
          const context = m.context.map((block) => (block.block?.$case === 'text' ? `${block.label ? `${block.label}:\n` : ''}${block.block.value}` : ''));
          const images = m.context.flatMap((block) => (block.block?.$case === 'binary' ? [{ mime_type: block.block.value.mimeType, data: Buffer.from(block.block.value.data).toString('base64') }] : []));
          // Each turn is a trace of its own, linked to this call's span (which lasts as long as the connection).
          await inOwnTrace(() => this.deps.sessions.sendMessage(scope, sid, {
            content: [m.content, ...context.filter(Boolean)].join('\n\n'),
            ...(images.length > 0 && { images }),
            ...(m.messageId && { message_id: m.messageId }),
            ...(m.tools.length > 0 && { tools: toolInputs(m.tools) }),
            ...(m.systemContext && { system_context: m.systemContext }),
          }));
          return;
        }
        case 'toolResult': {
          const t = r.value;
          await this.deps.sessions.submitToolResult(scope, sid, {
            tool_call_id: t.toolCallId, success: t.success, result: t.result, truncated: t.truncated,
            ...(t.exitCode !== undefined && { exit_code: t.exitCode }),
            ...(t.durationMs !== undefined && { duration_ms: t.durationMs }),
          });
          return;
        }
        case 'registerTools':
          await this.deps.sessions.registerTools(scope, sid, {
            ...(r.value.source && { source: r.value.source }), tools: toolInputs(r.value.tools), ...(r.value.systemContext && { system_context: r.value.systemContext }),
          });
          return;
        case 'cancelTurn':
          await this.deps.sessions.cancelTurn(scope, sid, r.value.reason || 'cancelled by the client');
          return;
        case 'cancelSession':
          // The log's session_closed ends the pump, which ends the call.
          await this.deps.sessions.close(scope, sid, r.value.reason || 'closed by the client');
          return;
        case 'feedback':
          // roz stores ratings; Cadre accepts them without an answer, so roz IDEs keep working.
          return;
        case 'permissionDecision': {
          // approval_id is the ActivityUpdate's detail; roz's first shape sent the tool_call_id there: both work.
          // A modifier (roz's Struct) amends the call's arguments; the engine checks it against the tool's schema.
          await this.deps.sessions.decideApproval(scope, sid, r.value.approvalId, r.value.approved, r.value.approved ? '' : 'denied by the user', keyName(scope), 'once', r.value.modifier);
          return;
        }
        case 'webrtcAnswer':
        case 'iceCandidate':
        case 'cameraRequest':
          return this.send(sessionError('unimplemented', 'Cadre serves no cameras or WebRTC media'));
        case 'ping':
          return this.send({ response: { $case: 'pong', value: {} }, seq: 0, sessionId: sid });
        case undefined:
          return this.send(sessionError('invalid_argument', 'empty SessionRequest'));
        default: {
          const never: never = r;
          return never;
        }
      }
    } catch (err) {
      // After the start, a refused request is answered in band and the stream stays open (roz's behaviour).
      this.send(inBand(err, sid, this.deps.logger));
    }
  }

  /** Sends the session's log after `afterSeq`, live; ends the call after session_closed. */
  private async pump(afterSeq: number): Promise<void> {
    const sid = this.sessionId!;
    try {
      // A client resuming after a ToolRequest that still waits may have lost it: send it again first.
      for (const pending of await this.deps.sessions.pendingToolRequests(this.principal!, sid, afterSeq)) {
        this.send({ response: { $case: 'toolRequest', value: toolRequest(pending.payload) }, seq: pending.seq, sessionId: sid });
      }
      // And an approval still waiting: its ActivityUpdate("waiting_approval") again, at its approval_requested's seq.
      for (const pending of await this.deps.sessions.pendingApprovals(this.principal!, sid, afterSeq)) {
        this.send({ response: { $case: 'activityUpdate', value: { state: 'waiting_approval', detail: pending.payload.approval_id } }, seq: pending.seq, sessionId: sid });
      }
      const watcher = this.watcher;
      if (watcher) {
        for await (const event of watcher) {
          if (this.done) break;
          const frame = toSessionResponse(sid, event);
          if (frame && !this.call.write(frame)) await writable(this.call, 'cancelled', { watcher });
          if (this.halfClosed && (event.event_type === 'turn_complete' || event.event_type === 'tool_request')) break;
        }
      }
      this.finish();
    } catch (err) {
      this.fail(err);
    }
  }

  private async halfClose(): Promise<void> {
    this.halfClosed = true;
    if (this.done) return;
    // turn_complete is committed with the status change, so `running` means it is still to come through the pump.
    const usage = this.sessionId === undefined ? null : await this.deps.sessions.usage(this.sessionId).catch(() => null);
    if (usage?.status !== 'running') this.finish();
  }

  /** Keepalive every period while a turn is in progress (running or waiting for client tools). */
  private scheduleKeepalive(): void {
    this.keepalive = setTimeout(() => {
      void this.deps.sessions
        .usage(this.sessionId!)
        .then((u) => {
          if (u && (u.status === 'running' || u.status === 'waiting_tool')) {
            this.send({ response: { $case: 'keepalive', value: { tokensUsed: u.tokens_used, tokensMax: u.tokens_max } }, seq: 0, sessionId: this.sessionId! });
          }
        })
        .catch(() => undefined)
        .finally(() => {
          if (!this.done) this.scheduleKeepalive();
        });
    }, this.deps.keepaliveMs);
    this.keepalive.unref();
  }

  private send(frame: SessionResponse): void {
    if (!this.done && !this.call.cancelled) this.call.write(frame);
  }

  protected override stopped(): void {
    clearTimeout(this.keepalive);
  }
}

/** A refused request as roz's in-band SessionError (codes: not_found, turn_in_progress, invalid_argument, ...). */
function inBand(err: unknown, sessionId: string, logger: Logger): SessionResponse {
  const frame = (code: string, message: string, retryable: boolean): SessionResponse => ({ response: { $case: 'error', value: { code, message, retryable } }, seq: 0, sessionId });
  if (err instanceof SessionEngineError) {
    const code = err.code === 'tool_call_not_found' ? 'not_found' : err.code === 'tool_call_finished' ? 'invalid_argument' : err.code;
    return frame(code, err.message, false);
  }
  const api = toApiError(err);
  if (api) return frame(api.code, api.message, api.code === 'unavailable');
  logger.error({ err, sessionId }, 'StreamSession request failed');
  return frame('internal', 'internal error', true);
}

import type * as grpc from '@grpc/grpc-js';
import { applyAnswerEvent, emptyAnswer, type Answer } from '@cadre/board';
import { kontekst, type SessionEvent } from '@cadre/protocol';
import { SessionEngineError, type SessionEngine } from '@cadre/session';
import { keyName } from '../approvals/approval-service.ts';
import type { Authenticator, Principal } from '../auth.ts';
import { writable } from '../streams/writable.ts';
import { BidiSessionCall, type BidiCallDeps } from './bidi-session-call.ts';
import { metadataValue } from './metadata.ts';

export interface KontekstRunDeps extends BidiCallDeps {
  auth: Authenticator;
  sessions: SessionEngine;
  /** How long a proposed call waits for ApproveTool/DenyTool before it is denied (kontekst waits for ever). */
  approvalTimeoutSecs: number;
}

type Call = grpc.ServerDuplexStream<kontekst.RunCommand, kontekst.RunEvent>;
type RunEventCase = NonNullable<kontekst.RunEvent['event']>;

/** The workspace a run's session is created in when the key reaches every workspace and the call names none. */
export const DEFAULT_RUN_WORKSPACE = 'default';
const WORKSPACE_HEADER = 'x-cadre-workspace-id';

/**
 * kontekst.AgentService/Run: one bidi call is one run, a turn of a session whose every tool call is proposed
 * (the session's policy asks for `*`) and whose denied call ends the run. The run's events come from the
 * session's log through the shared fan-out; this edge only translates them: the deltas of one model answer
 * become TurnCompleted + ContextSnapshot, and the approval_requested events of one answer (index 1..count) one
 * ToolsProposed in the model's order.
 */
export function kontekstAgentService(deps: KontekstRunDeps): { definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation } {
  return {
    definition: kontekst.AgentServiceService as unknown as grpc.ServiceDefinition,
    implementation: { run: (call: Call) => new RunCall(deps, call).open() },
  };
}

/**
 * One Run. Bad input ends the call with its status (kontekst has no in-band error but RunFailed, which is terminal);
 * a drain leaves the run's turn going on (or waiting on its proposals): the README says how a client gets back to it.
 */
class RunCall extends BidiSessionCall<kontekst.RunCommand, kontekst.RunEvent, KontekstRunDeps> {
  private runId = '';
  private terminal = false;
  // What the current model answer said so far, and the run's last answer.
  /** The model answer since the last TurnCompleted (what a lost attempt streamed past its boundary dropped). */
  private answer: Answer = emptyAnswer();
  private proposed: kontekst.ProposedToolCall[] = [];
  private unfinished = new Set<string>();
  private lastError = '';

  constructor(deps: KontekstRunDeps, call: Call) {
    super(deps, call, 'kontekst Run');
  }

  open(): void {
    this.listen();
    // As kontekst: the client closing its side, cancelling or going away cancels the run. grpc-js also emits
    // 'cancelled' after a status the gateway sent itself (a drain's UNAVAILABLE, a refused command's
    // INVALID_ARGUMENT): a call the gateway ended leaves the turn as it is. The cancel waits for the commands before
    // it, so a start still in flight has started its turn (or failed) when the cancel looks.
    const clientEnded = (reason: string): Promise<void> => (this.done ? Promise.resolve() : this.chain.then(() => this.cancelRun(reason)));
    this.call.on('end', () => void clientEnded('the client closed the stream'));
    this.call.on('cancelled', () => void clientEnded('the client went away').finally(() => this.stop()));
  }

  protected async handle(command: kontekst.RunCommand): Promise<void> {
    if (this.done) return;
    const c = command.command;
    if (this.sessionId === undefined) {
      if (c?.$case !== 'start') throw new SessionEngineError('invalid_argument', 'the first command of a run must be start (StartRunCommand)');
      return this.start(c.value);
    }
    const scope = this.principal!;
    const sid = this.sessionId;
    switch (c?.$case) {
      case 'start':
        // kontekst answers a second start with RunFailed and goes on with the run it has.
        return this.emit({ $case: 'failed', value: { runId: this.runId, error: 'run already started' } });
      case 'approveTool':
        return this.decide(scope, sid, c.value.callId, true, '');
      case 'denyTool':
        return this.decide(scope, sid, c.value.callId, false, c.value.reason || 'denied by the user');
      case 'cancel':
        return this.cancelRun('cancelled by the client');
      case undefined:
        return;
      default: {
        const never: never = c;
        return never;
      }
    }
  }

  private async start(start: kontekst.StartRunCommand): Promise<void> {
    this.principal = this.deps.auth.authenticate(metadataValue(this.call.metadata, 'authorization'));
    const scope = this.principal;
    if (start.skill?.name) {
      // kontekst without a skills registry answers the same way; Cadre has none.
      this.sessionId = '';
      this.emit({ $case: 'failed', value: { runId: '', error: 'skills not available' } });
      return this.finish();
    }
    const agentName = start.agentName || 'default';
    let sessionId = start.sessionId;
    if (!sessionId) {
      const workspace = scope.workspaces === 'all' ? metadataValue(this.call.metadata, WORKSPACE_HEADER) || DEFAULT_RUN_WORKSPACE : scope.workspaces;
      const session = await this.deps.sessions.create(scope, {
        workspace_id: workspace,
        approval_policy: { rules: [{ tool: '*', action: 'ask', timeout_secs: this.deps.approvalTimeoutSecs, reason: 'kontekst proposes every tool call' }] },
        stop_on_denial: true,
      });
      sessionId = session.session_id;
    }
    const session = await this.deps.sessions.get(scope, sessionId);
    // A call that ended while the start was in flight (a drain) starts no turn.
    if (!this.adopt(await this.deps.sessions.watch(scope, sessionId, session.last_seq))) return;
    this.sessionId = sessionId;
    const { message_id: runId } = await this.deps.sessions.sendMessage(scope, sessionId, { content: start.prompt || '(no prompt)' });
    this.runId = runId;
    this.emit({ $case: 'started', value: { runId, sessionId, agentName } });
    void this.pump();
  }

  private async decide(scope: Principal, sessionId: string, callId: string, approved: boolean, reason: string): Promise<void> {
    try {
      await this.deps.sessions.decideApproval(scope, sessionId, callId, approved, reason, keyName(scope));
    } catch (err) {
      // As kontekst: a decision for an unknown or already decided call changes nothing and is not an error.
      if (err instanceof SessionEngineError && (err.code === 'not_found' || err.code === 'conflict')) return;
      throw err;
    }
  }

  private async cancelRun(reason: string): Promise<void> {
    // Only a run that started its turn: a start refused (a turn already in progress) must not cancel that turn.
    if (this.terminal || !this.runId || !this.sessionId || !this.principal) return;
    await this.deps.sessions.cancelTurn(this.principal, this.sessionId, reason).catch(() => undefined);
  }

  /** The session's log from the run's start, translated, until the run's terminal event. */
  private async pump(): Promise<void> {
    const watcher = this.watcher!;
    try {
      for await (const event of watcher) {
        if (this.done) break;
        for (const frame of await this.translate(event)) {
          if (!this.call.write({ event: frame }) && !this.done && !this.call.cancelled) await writable(this.call, 'cancelled', { watcher });
        }
        if (this.terminal) break;
      }
      this.finish();
    } catch (err) {
      this.fail(err);
    }
  }

  private async translate(event: SessionEvent): Promise<RunEventCase[]> {
    applyAnswerEvent(this.answer, event);
    switch (event.event_type) {
      case 'text_delta':
        return [{ $case: 'token', value: { text: event.payload.content } }];
      case 'thinking_delta':
        return [{ $case: 'reasoning', value: { text: event.payload.content } }];
      case 'approval_requested': {
        const p = event.payload;
        this.proposed.push({ callId: p.tool_call_id, name: p.tool_name, argumentsJson: p.arguments, preview: '' });
        if (p.index < p.count) return [];
        // The answer's last proposal: the turn is complete, its calls go out together in the model's order.
        const calls = this.proposed;
        this.proposed = [];
        for (const call of calls) this.unfinished.add(call.callId);
        return [...(await this.turnCompleted()), { $case: 'toolsProposed', value: { calls } }];
      }
      case 'tool_call':
        return this.unfinished.has(event.payload.tool_call_id) ? [{ $case: 'toolStarted', value: { callId: event.payload.tool_call_id } }] : [];
      case 'tool_result': {
        const p = event.payload;
        if (!this.unfinished.delete(p.tool_call_id)) return [];
        const frame: RunEventCase = p.success
          ? { $case: 'toolCompleted', value: { callId: p.tool_call_id, output: p.result } }
          : { $case: 'toolFailed', value: { callId: p.tool_call_id, error: p.result } };
        return this.unfinished.size === 0 ? [frame, { $case: 'toolsCompleted', value: {} }] : [frame];
      }
      case 'session_error':
        this.lastError = event.payload.message;
        return [];
      case 'turn_complete': {
        if (event.payload.message_id !== this.runId) return [];
        this.terminal = true;
        const stop = event.payload.stop_reason;
        if (stop === 'cancelled' || stop === 'denied') return [{ $case: 'cancelled', value: { runId: this.runId } }];
        if (stop === 'error') return [{ $case: 'failed', value: { runId: this.runId, error: this.lastError || 'the run failed' } }];
        const { text: content, thinking: reasoning } = this.answer;
        return [...(await this.turnCompleted()), { $case: 'completed', value: { runId: this.runId, content, reasoning } }];
      }
      case 'session_closed':
        this.terminal = true;
        return [{ $case: 'cancelled', value: { runId: this.runId } }];
      default:
        return [];
    }
  }

  /** TurnCompleted and ContextSnapshot for the model answer that just ended (kontekst sends both). */
  private async turnCompleted(): Promise<RunEventCase[]> {
    const usage = await this.deps.sessions.usage(this.sessionId!);
    const max = usage?.tokens_max ?? 0;
    const used = usage?.tokens_used ?? 0;
    const context: kontekst.ContextSnapshot = {
      contextSize: max, systemTokens: 0, toolTokens: 0, historyTokens: 0, memoryTokens: used, totalTokens: used,
      remainingTokens: Math.max(0, max - used), historyMessages: 0, memoryMessages: 0, totalMessages: 0, historyBudget: 0, messages: [],
    };
    const frames: RunEventCase[] = [
      { $case: 'turnCompleted', value: { content: this.answer.text, reasoning: this.answer.thinking, context } },
      { $case: 'contextSnapshot', value: { context } },
    ];
    this.answer = emptyAnswer();
    return frames;
  }

  private emit(event: RunEventCase): void {
    if (!this.done && !this.call.cancelled) this.call.write({ event });
  }

}

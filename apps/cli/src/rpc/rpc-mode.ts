// `cadre rpc`: oh-my-pi RPC mode over stdio (reference 003): one JSON command per stdin line; responses
// {id?, type:"response", command, success, data?|error} and session events as JSON lines on stdout. It drives a
// session on a gateway through the HTTP session API, so the conversation outlives this process.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { applyAnswerEvent, emptyAnswer, followStream, type Answer, type SessionEventLike, type StreamHandle } from '@cadre/board';
import type { CadreClient } from '../client.ts';

// Commands from stdin and gateway answers are untyped JSON, checked field by field where they are used.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = Record<string, any>;
type Out = (line: object) => void;

// Commands of the protocol Cadre answers with success:false, and why.
const REFUSED: Record<string, string> = {
  compact: 'compaction runs in the session engine on its own; it cannot be asked for',
  set_auto_compaction: 'compaction is always on in Cadre sessions',
  set_auto_retry: 'model retries are the worker pool\'s setting, not a session\'s',
  abort_retry: 'no retry is waiting: model retries happen inside the worker',
};

export class RpcMode {
  private readonly client: CadreClient;
  private readonly workspace: string;
  private readonly out: Out;
  private sessionId: string | null = null;
  private events: StreamHandle | null = null;
  private lastText = '';
  /** The answer being streamed (a lost attempt's unfinished model call dropped, as the next attempt streams it again). */
  private answer: Answer = emptyAnswer();
  private sessionName = '';
  private bash: ChildProcess | null = null;

  constructor(client: CadreClient, workspace: string, out: Out) {
    this.client = client;
    this.workspace = workspace;
    this.out = out;
  }

  async run(input: NodeJS.ReadableStream): Promise<void> {
    const lines = createInterface({ input, crlfDelay: Infinity });
    for await (const line of lines) {
      if (line.trim() === '') continue;
      let command: Json;
      try {
        command = JSON.parse(line) as Json;
        if (typeof command !== 'object' || command === null || Array.isArray(command) || typeof command.type !== 'string') throw new Error('a command is a JSON object with a string "type"');
      } catch (err) {
        this.out({ type: 'response', command: 'parse', success: false, error: `Failed to parse command: ${(err as Error).message}` });
        continue;
      }
      await this.dispatch(command);
    }
    this.events?.close();
    this.bash?.kill();
  }

  private respond(command: Json, result: { data?: unknown } | { error: string }): void {
    const base = { ...(command.id !== undefined && { id: command.id }), type: 'response', command: command.type };
    this.out('error' in result ? { ...base, success: false, error: result.error } : { ...base, success: true, ...(result.data !== undefined && { data: result.data }) });
  }

  private async dispatch(c: Json): Promise<void> {
    try {
      const result = await this.execute(c);
      if (result === undefined) return;
      this.respond(c, result);
    } catch (err) {
      this.respond(c, { error: (err as Error).message });
    }
  }

  private async execute(c: Json): Promise<{ data?: unknown } | { error: string } | undefined> {
    const text = (withImages = false): string => {
      if (typeof c.message !== 'string' || c.message === '') throw new Error(`${c.type}: "message" must be a non-empty string`);
      if (c.images?.length && !withImages) throw new Error(`${c.type}: images are only taken by prompt (a steer or follow-up is text)`);
      return c.message;
    };
    switch (c.type) {
      case 'prompt': {
        const message = text(true);
        if (c.images !== undefined && (!Array.isArray(c.images) || (c.images as Json[]).some((i) => i?.type !== 'image' || typeof i.data !== 'string' || typeof i.mimeType !== 'string'))) {
          return { error: 'images must be ImageContent objects {type:"image", data: base64, mimeType}' };
        }
        const images = ((c.images ?? []) as Json[]).map((i) => ({ mime_type: i.mimeType as string, data: i.data as string }));
        const behavior = c.streamingBehavior === 'followUp' ? 'follow_up' : c.streamingBehavior === 'steer' ? 'steer' : undefined;
        if (c.streamingBehavior !== undefined && !behavior) return { error: 'streamingBehavior must be "steer" or "followUp"' };
        const id = await this.session();
        this.respond(c, {});
        // Acknowledged at once; a refusal later comes as a second response with the same id.
        try {
          await this.client.call('POST', `/api/sessions/${id}/messages`, { content: message, ...(images.length > 0 && { images }), ...(behavior && { streaming_behavior: behavior }) }, this.client.taskHeaders());
        } catch (err) {
          const busy = (err as { status?: number }).status === 409 && !behavior;
          this.respond(c, { error: busy ? 'Agent is already streaming: send prompt with streamingBehavior "steer" or "followUp"' : (err as Error).message });
        }
        return undefined;
      }
      case 'steer':
      case 'follow_up': {
        const message = text();
        const id = await this.session();
        const data = await this.client.call('POST', `/api/sessions/${id}/${c.type === 'steer' ? 'steer' : 'follow-ups'}`, { content: message }, this.client.taskHeaders());
        return { data: { input_id: data.input_id, outcome: data.outcome } };
      }
      case 'abort':
        if (!this.sessionId) return { data: { aborted: false } };
        return { data: await this.client.call('POST', `/api/sessions/${this.sessionId}/abort`, {}, this.client.taskHeaders()) };
      case 'abort_and_prompt': {
        const message = text();
        const id = await this.session();
        this.respond(c, {});
        await this.client.call('POST', `/api/sessions/${id}/abort`, { prompt: { content: message } }, this.client.taskHeaders()).catch((err: Error) => this.respond(c, { error: err.message }));
        return undefined;
      }
      case 'new_session':
        this.events?.close();
        this.sessionId = null;
        await this.session();
        return { data: { cancelled: false, sessionId: this.sessionId } };
      case 'get_state': {
        const s = this.sessionId ? (await this.client.call('GET', `/api/sessions/${this.sessionId}`, undefined, this.client.taskHeaders())).session : null;
        return {
          data: {
            model: s ? { provider: 'cadre', id: s.model } : null,
            thinkingLevel: 'off', isStreaming: s ? s.status === 'running' || s.status === 'waiting_tool' : false, isCompacting: false,
            steeringMode: s?.steering_mode ?? 'one-at-a-time', followUpMode: s?.follow_up_mode ?? 'one-at-a-time', interruptMode: s?.interrupt_mode ?? 'immediate',
            sessionId: this.sessionId, sessionName: this.sessionName, autoCompactionEnabled: true, messageCount: s?.turn ?? 0,
            queuedMessageCount: s ? s.queued_steering.length + s.queued_follow_ups.length : 0,
            steeringQueue: s?.queued_steering ?? [], followUpQueue: s?.queued_follow_ups ?? [],
          },
        };
      }
      case 'get_last_assistant_text':
        return { data: { text: this.lastText || null } };
      case 'get_session_stats': {
        if (!this.sessionId) return { data: { sessionId: null, turns: 0 } };
        const s = (await this.client.call('GET', `/api/sessions/${this.sessionId}`, undefined, this.client.taskHeaders())).session;
        return { data: { sessionId: s.session_id, turns: s.turn, status: s.status, lastSeq: s.last_seq } };
      }
      case 'get_available_models': {
        const { models } = await this.client.call('GET', '/api/models', undefined, this.client.taskHeaders());
        return { data: { models: (models as string[]).map((id) => ({ provider: 'cadre', id })) } };
      }
      case 'set_model': {
        if (typeof c.modelId !== 'string' || c.modelId === '') return { error: 'modelId must be a non-empty string' };
        const { models } = await this.client.call('GET', '/api/models', undefined, this.client.taskHeaders());
        if ((c.provider !== undefined && c.provider !== 'cadre') || !(models as string[]).includes(c.modelId)) {
          return { error: `Model not found: ${String(c.provider ?? 'cadre')}/${c.modelId} (available: ${(models as string[]).map((m) => `cadre/${m}`).join(', ')})` };
        }
        const id = await this.session();
        const s = (await this.client.call('PUT', `/api/sessions/${id}/model`, { model: c.modelId }, this.client.taskHeaders())).session;
        return { data: { provider: 'cadre', id: s.model } };
      }
      case 'get_messages': {
        if (!this.sessionId) return { data: { messages: [] } };
        const { messages } = await this.client.call('GET', `/api/sessions/${this.sessionId}/messages`, undefined, this.client.taskHeaders());
        return { data: { messages: (messages as Json[]).map(agentMessage) } };
      }
      case 'set_steering_mode':
      case 'set_follow_up_mode':
      case 'set_interrupt_mode': {
        const field = c.type === 'set_steering_mode' ? 'steering_mode' : c.type === 'set_follow_up_mode' ? 'follow_up_mode' : 'interrupt_mode';
        const id = await this.session();
        await this.client.call('PATCH', `/api/sessions/${id}/modes`, { [field]: c.mode }, this.client.taskHeaders());
        return {};
      }
      case 'set_session_name':
        if (typeof c.name !== 'string' || c.name.trim() === '') return { error: 'name must be a non-empty string' };
        this.sessionName = c.name;
        return {};
      case 'approve':
      case 'deny': {
        // Cadre's commands for an approval the session asks (its extension_ui_request's id is the approval id).
        if (typeof c.approval_id !== 'string' || c.approval_id === '') return { error: `${c.type}: "approval_id" must be a non-empty string` };
        if (c.reason !== undefined && typeof c.reason !== 'string') return { error: `${c.type}: "reason" must be a string` };
        // approve's modifier: the call's amended arguments; the gateway checks them against the tool's schema (a
        // refusal is a failed response and the approval stays pending).
        if (c.modifier !== undefined && c.type === 'deny') return { error: 'deny: "modifier" amends an approved call; a denial takes none' };
        if (c.modifier !== undefined && (typeof c.modifier !== 'object' || c.modifier === null || Array.isArray(c.modifier))) return { error: 'approve: "modifier" must be an object (the amended arguments)' };
        return { data: await this.decide(c.approval_id, c.type === 'approve', c.reason as string | undefined, c.modifier as Json | undefined) };
      }
      case 'extension_ui_response': {
        // oh-my-pi's answer to a confirm dialog: confirmed true approves, false or cancelled denies. No response
        // line, as oh-my-pi; a refused answer is reported as a failed response.
        if (typeof c.id !== 'string' || (typeof c.confirmed !== 'boolean' && c.cancelled !== true)) {
          return { error: 'extension_ui_response needs an "id" and "confirmed" (boolean) or "cancelled": true' };
        }
        await this.decide(c.id, c.confirmed === true, c.confirmed === true ? undefined : c.cancelled === true ? 'cancelled in the dialog' : 'denied in the dialog');
        return undefined;
      }
      case 'bash':
        return this.runBash(c);
      case 'abort_bash':
        this.bash?.kill();
        return {};
      default: {
        const reason = REFUSED[c.type];
        if (reason) return { error: `${c.type} is not supported by cadre rpc: ${reason}` };
        // The protocol answers an unknown command without its id.
        this.out({ type: 'response', command: c.type, success: false, error: `Unknown command: ${c.type}` });
        return undefined;
      }
    }
  }

  /** bash runs in this process's working directory; its output is the response. */
  private runBash(c: Json): Promise<{ data: unknown } | { error: string }> {
    if (typeof c.command !== 'string' || c.command === '') return Promise.resolve({ error: 'command must be a non-empty string' });
    if (this.bash) return Promise.resolve({ error: 'a bash command is already running' });
    return new Promise((resolve) => {
      const child = spawn('bash', ['-c', c.command as string], { cwd: process.cwd(), stdio: ['ignore', 'pipe', 'pipe'] });
      this.bash = child;
      let output = '';
      child.stdout.on('data', (d: Buffer) => (output += d.toString()));
      child.stderr.on('data', (d: Buffer) => (output += d.toString()));
      child.on('close', (code, signal) => {
        this.bash = null;
        resolve({ data: { output: output.slice(-100_000), exitCode: code, cancelled: signal !== null, truncated: output.length > 100_000 } });
      });
    });
  }

  private async decide(approvalId: string, approved: boolean, reason: string | undefined, modifier?: Json): Promise<unknown> {
    const body = { approved, ...(reason !== undefined && { reason }), ...(modifier !== undefined && { modifier }) };
    const decided = await this.client.call('POST', `/api/approvals/${encodeURIComponent(approvalId)}/decision`, body, this.client.taskHeaders());
    return decided.approval;
  }

  private async session(): Promise<string> {
    if (this.sessionId) return this.sessionId;
    const created = await this.client.call('POST', '/api/sessions', { workspace_id: this.workspace }, this.client.taskHeaders());
    this.sessionId = created.session.session_id as string;
    this.follow(this.sessionId);
    return this.sessionId;
  }

  /**
   * Follows the session's SSE stream (the same follower as the board and `cadre task watch`: it resumes from its
   * last seq after a dropped connection) and writes each event as agent events, until stdin closes or the session
   * changes. A stream, not a poll: the first event reaches stdout as soon as the gateway relays it.
   */
  private follow(sessionId: string): void {
    this.events = followStream({
      url: `${this.client.config.url}/api/sessions/${encodeURIComponent(sessionId)}/stream`,
      headers: () => this.client.taskHeaders(),
      afterSeq: 0,
      isTerminal: (type) => type === 'session_closed',
      onEvent: (e) => {
        for (const line of this.toAgentEvents(e as Json)) this.out(line);
      },
    });
  }

  private toAgentEvents(e: Json): object[] {
    const p = e.payload as Json;
    applyAnswerEvent(this.answer, e as SessionEventLike);
    switch (e.event_type) {
      case 'user_message':
        this.answer = emptyAnswer();
        return [{ type: 'agent_start' }, { type: 'turn_start', turn: p.turn }, { type: 'message_start', message: { role: 'user', content: p.content } }];
      case 'text_delta':
        return [{ type: 'message_update', assistantMessageEvent: { type: 'text_delta', delta: p.content } }];
      case 'thinking_delta':
        return [{ type: 'message_update', assistantMessageEvent: { type: 'thinking_delta', delta: p.content } }];
      case 'tool_call':
        return [{ type: 'tool_execution_start', toolCallId: p.tool_call_id, toolName: p.tool_name, args: p.arguments }];
      case 'tool_result':
        return [{ type: 'tool_execution_end', toolCallId: p.tool_call_id, toolName: p.tool_name, result: p.result, isError: !p.success }];
      case 'input_queued':
      case 'input_delivered':
      case 'input_dropped':
        if (e.event_type === 'input_delivered') this.answer = emptyAnswer();
        return [{ type: e.event_type, ...p }];
      case 'turn_complete':
        this.lastText = this.answer.text;
        return [{ type: 'message_end', message: { role: 'assistant', content: this.answer.text } }, { type: 'turn_end', stopReason: p.stop_reason, usage: p.usage }, { type: 'agent_end' }];
      case 'approval_requested':
        // oh-my-pi's extension UI confirm dialog; answered by extension_ui_response (or Cadre's approve / deny).
        return [{
          type: 'extension_ui_request', id: p.approval_id, method: 'confirm', title: `Allow ${p.tool_name}?`,
          message: `${p.reason}: ${p.tool_name}(${p.arguments})`, timeout: p.timeout_secs * 1000,
          approval: { approval_id: p.approval_id, tool_call_id: p.tool_call_id, tool_name: p.tool_name, arguments: p.arguments, reason: p.reason, index: p.index, count: p.count },
        }];
      case 'approval_resolved':
        return [{ type: 'approval_resolved', ...p }];
      case 'session_error':
        return [{ type: 'error', code: p.code, message: p.message }];
      case 'attempt_lost':
        // Cadre's: the text_delta updates since the model call began come again; message_end has the answer once.
        return [{ type: 'attempt_lost', ...p }];
      default:
        return [];
    }
  }
}

/** A transcript entry (an OpenAI chat message) as oh-my-pi's AgentMessage: content blocks, tool calls, tool results. */
function agentMessage(m: Json): Json {
  const text = (content: unknown): Json[] => (typeof content === 'string' && content !== '' ? [{ type: 'text', text: content }] : []);
  switch (m.role) {
    case 'assistant':
      return {
        role: 'assistant',
        content: [
          ...text(m.content),
          ...((m.tool_calls ?? []) as Json[]).map((call) => ({ type: 'toolCall', id: call.id, name: call.function?.name, arguments: parseJson(call.function?.arguments) })),
        ],
      };
    case 'tool':
      return { role: 'toolResult', toolCallId: m.tool_call_id, content: text(m.content), isError: typeof m.content === 'string' && m.content.startsWith('error:') };
    default:
      return { role: m.role, content: Array.isArray(m.content) ? m.content : text(m.content) };
  }
}

function parseJson(raw: unknown): unknown {
  try {
    return typeof raw === 'string' ? JSON.parse(raw) : raw;
  } catch {
    return raw;
  }
}

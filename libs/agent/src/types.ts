import type OpenAI from 'openai';
import type { ChatCompletionMessageFunctionToolCall, ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import type { TokenUsage } from '@cadre/protocol';

export interface ToolContext {
  /** Aborted when the run is cancelled or times out; a tool must stop promptly and reject with an AbortError. */
  signal: AbortSignal;
  /** The model's id of this call (as `onToolCall` saw it): two identical calls in one turn have different ids. */
  callId: string;
}

export interface AgentTool {
  name: string;
  description: string;
  /** JSON schema of the arguments object. */
  parameters: Record<string, unknown>;
  /** Returns the text the model sees. A thrown error becomes `error: <message>` for the model, except an AbortError. */
  run(args: unknown, ctx: ToolContext): Promise<string>;
}

export interface AgentSpec {
  role: string;
  instructions: string;
  model: string;
  tools: AgentTool[];
  maxTurns: number;
  timeoutMs: number;
}

/**
 * Awaited in order. The caller appends events to a durable log; a hook that throws stops the loop and the error is
 * rethrown from runAgent (that is how a fenced or cancelled writer is stopped).
 */
export interface AgentHooks {
  /** Before each model call; turn starts at 1. */
  onTurn(turn: number): Promise<void>;
  /** Once per tool call, in the model's order, before any of that turn's tools run. */
  onToolCall(call: { tool: string; callId: string; arguments: string }): Promise<void>;
}

export type AgentFailureReason = 'model_error' | 'timeout' | 'cancelled' | 'max_turns' | 'tool_error';

export type AgentOutcome =
  | { ok: true; result: string; usage: TokenUsage; turns: number }
  | { ok: false; reason: AgentFailureReason; message: string; usage: TokenUsage; turns: number };

/** What the loop reports for metrics (all optional; called synchronously, must not throw). */
export interface AgentObserver {
  modelCall?(call: { model: string; outcome: 'ok' | 'error'; seconds: number; inputTokens: number; outputTokens: number }): void;
  /** A turn: its model call and the tool calls it asked for. */
  turn?(turn: { seconds: number }): void;
  /** `tool` is the tool's name, or `unknown` for a name the agent does not have. */
  toolCall?(call: { tool: string; outcome: 'ok' | 'error' | 'aborted'; seconds: number }): void;
}

/** The loop's state at a tool-call boundary: enough to go on from there without re-running the model turn. */
export interface AgentSnapshot {
  messages: ChatCompletionMessageParam[];
  usage: TokenUsage;
  turns: number;
  toolCalls: ChatCompletionMessageFunctionToolCall[];
}

/**
 * What one tool call runs as: null (the call as the model made it), a denial reason the model sees as a tool
 * error, or `{arguments}` (the call with these instead, an approver's amended arguments: JSON text).
 */
export type ToolVerdict = string | null | { arguments: string };

/**
 * Decides a turn's tool calls before they run, a verdict per call. Throwing stops the loop (runAgent rethrows):
 * that is how a caller parks it at `snapshot`.
 */
export type ToolGate = (calls: ChatCompletionMessageFunctionToolCall[], snapshot: AgentSnapshot) => Promise<ToolVerdict[]>;

export interface RunAgentOptions {
  /** Asked before each turn's tools run. */
  gate?: ToolGate;
  /** Goes on from a parked snapshot: its tool calls run first, each as its verdict says. */
  resume?: AgentSnapshot & { verdicts: ToolVerdict[] };
  client: OpenAI;
  spec: AgentSpec;
  /** The user message: the goal or assignment. */
  input: string;
  signal: AbortSignal;
  hooks: AgentHooks;
  /**
   * The agent's deadline, when the caller keeps its own clock (e.g. one that stops while a run is paused);
   * it fires as the `timeout` outcome. Default: `spec.timeoutMs` of wall-clock time from the start.
   */
  deadline?: AbortSignal;
  /** Metrics hooks; spans are recorded regardless (no-ops unless tracing is on). */
  observer?: AgentObserver;
}

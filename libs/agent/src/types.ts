import type OpenAI from 'openai';
import type { TokenUsage } from '@cadre/protocol';

export interface ToolContext {
  /** Aborted when the run is cancelled or times out; a tool must stop promptly and reject with an AbortError. */
  signal: AbortSignal;
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

export interface RunAgentOptions {
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
}

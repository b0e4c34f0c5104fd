// @cadre/agent: the agent loop shared by the worker pool and VM agents, its model client and builtin tools.
export type {
  AgentFailureReason,
  AgentHooks,
  AgentObserver,
  AgentOutcome,
  AgentSpec,
  AgentTool,
  RunAgentOptions,
  ToolContext,
  AgentSnapshot,
  ToolGate,
  ToolVerdict,
} from './types.ts';
export { runAgent, runToolCall, modelErrorMessage, redact } from './run-agent.ts';
export { streamModelTurn, type ModelTurn } from './model-turn.ts';
export { untilAborted, isAbortError } from './abort.ts';
export { observeModelCall } from './telemetry.ts';
export { createModelClient } from './model-client.ts';
export type { ModelClientOptions } from './model-client.ts';
export { builtinTools, resolveTools, UnknownToolError, MAX_WAIT_MS } from './tools/builtin.ts';
export { evaluateArithmetic, CalculationError } from './tools/calculate.ts';
export { argumentsProblem, schemaProblem } from './tools/arguments.ts';

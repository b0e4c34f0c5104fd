import OpenAI from 'openai';
import type {
  ChatCompletionFunctionTool,
  ChatCompletionMessageFunctionToolCall,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import type { TokenUsage } from '@cadre/protocol';
import { isAbortError, untilAborted } from './abort.ts';
import { streamModelTurn } from './model-turn.ts';
import { observeModelCall, observeToolCall } from './telemetry.ts';
import type { AgentFailureReason, AgentObserver, AgentOutcome, AgentTool, RunAgentOptions, ToolContext, ToolVerdict } from './types.ts';

/**
 * Runs one agent to an outcome: model turn, tool calls, repeat until the model answers without tools.
 * Cancel (the caller's signal) and the spec's timeout abort the in-flight model stream and the running tools at
 * once. A hook that throws is rethrown: it is not an outcome.
 */
export async function runAgent(opts: RunAgentOptions): Promise<AgentOutcome> {
  const { client, spec, input, hooks, observer } = opts;
  const deadline = opts.deadline ?? AbortSignal.timeout(spec.timeoutMs);
  const signal = AbortSignal.any([opts.signal, deadline]);
  const toolsByName = new Map(spec.tools.map((tool) => [tool.name, tool]));
  const tools: ChatCompletionFunctionTool[] = spec.tools.map((tool) => ({
    type: 'function',
    function: { name: tool.name, description: tool.description, parameters: tool.parameters },
  }));
  const resume = opts.resume;
  const messages: ChatCompletionMessageParam[] = resume
    ? [...resume.messages]
    : [
        { role: 'system', content: `You are the ${spec.role} agent in a Cadre team.\n${spec.instructions}` },
        { role: 'user', content: input },
      ];
  const usage: TokenUsage = resume ? { ...resume.usage } : { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
  let turns = resume?.turns ?? 0;

  const fail = (reason: AgentFailureReason, message: string): AgentOutcome => ({
    ok: false,
    reason,
    message: redact(message, client.apiKey),
    usage: { ...usage },
    turns,
  });
  /** The outcome when `signal` has fired, telling the caller's cancel from our deadline. */
  const aborted = (): AgentOutcome =>
    opts.signal.aborted
      ? fail('cancelled', `cancelled: ${reasonText(opts.signal.reason)}`)
      : fail('timeout', `timed out after ${spec.timeoutMs} ms`);

  /**
   * Runs one turn's tool calls as their verdicts say (as asked, amended, or denied: the model gets the denial) and
   * appends the results in the model's order. Returns an outcome only when the loop must stop.
   */
  const toolStep = async (asked: ChatCompletionMessageFunctionToolCall[], verdicts: readonly ToolVerdict[]): Promise<AgentOutcome | null> => {
    const toolCalls = asked.map((call, i) => {
      const v = verdicts[i];
      return v && typeof v === 'object' ? { ...call, function: { ...call.function, arguments: v.arguments } } : call;
    });
    // The transcript's call is the one that runs (its assistant message is the last: the calls were just asked),
    // so the model's next turn sees the amended arguments.
    const last = messages.at(-1);
    if (last?.role === 'assistant' && toolCalls.some((c, i) => c !== asked[i])) messages[messages.length - 1] = { ...last, tool_calls: toolCalls };
    let results: string[];
    try {
      // Concurrent, but the results go back in the model's order so the transcript is deterministic.
      results = await untilAborted(
        Promise.all(toolCalls.map((call, i) => {
          const denial = verdicts[i];
          return typeof denial === 'string' ? Promise.resolve(`error: tool call denied: ${denial}`) : runToolCall(call, toolsByName, signal, observer);
        })),
        signal,
      );
    } catch (err) {
      if (signal.aborted) return aborted();
      return fail('tool_error', `tool aborted without a cancel: ${errorText(err)}`);
    }
    toolCalls.forEach((call, i) => {
      messages.push({ role: 'tool', tool_call_id: call.id, content: results[i] ?? '' });
    });
    return null;
  };

  if (resume) {
    // Picks up at the parked tool calls: nothing before them (the model turn included) runs again.
    const stopped = await toolStep(resume.toolCalls, resume.verdicts);
    if (stopped) return stopped;
  }

  while (true) {
    if (signal.aborted) return aborted();
    if (turns >= spec.maxTurns) {
      return fail('max_turns', `no answer after ${spec.maxTurns} turn${spec.maxTurns === 1 ? '' : 's'}`);
    }
    turns++;
    await hooks.onTurn(turns);
    if (signal.aborted) return aborted();
    const turnStarted = performance.now();
    const endTurn = (): void => observer?.turn?.({ seconds: (performance.now() - turnStarted) / 1000 });

    let turn;
    try {
      turn = await observeModelCall(spec.model, observer, () =>
        untilAborted(streamModelTurn(client, { model: spec.model, messages, ...(tools.length > 0 && { tools }) }, signal), signal),
      );
    } catch (err) {
      if (signal.aborted) return aborted();
      return fail('model_error', modelErrorMessage(err));
    }
    addUsage(usage, turn.usage);

    if (turn.toolCalls.length === 0) {
      endTurn();
      return { ok: true, result: turn.content, usage: { ...usage }, turns };
    }
    if (turns >= spec.maxTurns) {
      const wanted = turn.toolCalls.map((call) => call.function.name).join(', ');
      return fail('max_turns', `no answer after ${spec.maxTurns} turn${spec.maxTurns === 1 ? '' : 's'}; the model still called: ${wanted}`);
    }

    messages.push({ role: 'assistant', content: turn.content || null, tool_calls: turn.toolCalls });
    for (const call of turn.toolCalls) {
      await hooks.onToolCall({ tool: call.function.name, callId: call.id, arguments: call.function.arguments });
    }
    if (signal.aborted) return aborted();
    // The gate may deny calls, or throw to park the loop here (the caller keeps the snapshot and resumes later).
    const verdicts = opts.gate
      ? await opts.gate(turn.toolCalls, { messages: [...messages], usage: { ...usage }, turns, toolCalls: turn.toolCalls })
      : [];
    const stopped = await toolStep(turn.toolCalls, verdicts);
    if (stopped) return stopped;
    endTurn();
  }
}

/**
 * The text the model sees for one call. Unknown tools, bad JSON and tool errors are reported to the model so it can
 * recover; only an abort propagates.
 */
export async function runToolCall(
  call: ChatCompletionMessageFunctionToolCall,
  toolsByName: ReadonlyMap<string, AgentTool>,
  signal: AbortSignal,
  observer: AgentObserver | undefined,
): Promise<string> {
  const { name, arguments: rawArgs } = call.function;
  const ctx: ToolContext = { signal, callId: call.id };
  const tool = toolsByName.get(name);
  return observeToolCall({ name, callId: call.id, known: tool !== undefined }, observer, async () => {
    if (!tool) {
      const known = [...toolsByName.keys()].join(', ') || 'none';
      return { ok: false, text: `error: unknown tool "${name}"; available tools: ${known}` };
    }
    let args: unknown;
    try {
      args = rawArgs.trim() === '' ? {} : JSON.parse(rawArgs);
    } catch (err) {
      return { ok: false, text: `error: arguments for ${name} are not valid JSON (${errorText(err)})` };
    }
    try {
      return { ok: true, text: await tool.run(args, ctx) };
    } catch (err) {
      if (ctx.signal.aborted || isAbortError(err)) throw err;
      return { ok: false, text: `error: ${errorText(err)}` };
    }
  });
}

function addUsage(total: TokenUsage, turn: TokenUsage): void {
  total.prompt_tokens += turn.prompt_tokens;
  total.completion_tokens += turn.completion_tokens;
  total.total_tokens += turn.total_tokens;
}

/** Status and message only: an APIError also holds the response headers, which never leave this function. */
export function modelErrorMessage(err: unknown): string {
  if (err instanceof OpenAI.APIError) {
    return err.status === undefined ? `model API error: ${err.message}` : `model API error (status ${err.status}): ${err.message}`;
  }
  return `model API error: ${errorText(err)}`;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function reasonText(reason: unknown): string {
  if (reason instanceof Error) return reason.name === 'AbortError' ? 'aborted by the caller' : reason.message;
  return reason === undefined ? 'aborted by the caller' : String(reason);
}

/** `text` with every occurrence of `secret` (the model API key: a proxy may echo it in an error) replaced. */
export function redact(text: string, secret: string | null | undefined): string {
  return secret && secret.length >= 4 ? text.split(secret).join('[redacted]') : text;
}

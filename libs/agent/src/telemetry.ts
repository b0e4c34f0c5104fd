import { SpanKind, SpanStatusCode, tracer } from '@cadre/observability';
import type { ModelTurn } from './model-turn.ts';
import type { AgentObserver } from './types.ts';

/**
 * One model call as a CLIENT span named and attributed after OpenTelemetry's GenAI semantic conventions (`chat
 * <model>`: request and response model, token usage, finish reasons), and reported to the observer (metrics).
 */
export async function observeModelCall(model: string, observer: AgentObserver | undefined, call: () => Promise<ModelTurn>): Promise<ModelTurn> {
  const t0 = performance.now();
  return tracer.startActiveSpan(`chat ${model}`, {
    kind: SpanKind.CLIENT,
    attributes: { 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'openai', 'gen_ai.request.model': model },
  }, async (span) => {
    try {
      const turn = await call();
      span.setAttributes({
        'gen_ai.response.model': turn.responseModel ?? model,
        'gen_ai.usage.input_tokens': turn.usage.prompt_tokens,
        'gen_ai.usage.output_tokens': turn.usage.completion_tokens,
        'gen_ai.response.finish_reasons': turn.finishReason ? [turn.finishReason] : [],
      });
      observer?.modelCall?.({ model, outcome: 'ok', seconds: (performance.now() - t0) / 1000, inputTokens: turn.usage.prompt_tokens, outputTokens: turn.usage.completion_tokens });
      return turn;
    } catch (err) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
      span.setAttribute('error.type', err instanceof Error ? err.name : 'error');
      observer?.modelCall?.({ model, outcome: 'error', seconds: (performance.now() - t0) / 1000, inputTokens: 0, outputTokens: 0 });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** One tool call as an INTERNAL `execute_tool <name>` span (GenAI conventions), reported to the observer. */
export async function observeToolCall(tool: { name: string; callId: string; known: boolean }, observer: AgentObserver | undefined, run: () => Promise<{ text: string; ok: boolean }>): Promise<string> {
  const t0 = performance.now();
  return tracer.startActiveSpan(`execute_tool ${tool.name}`, {
    kind: SpanKind.INTERNAL,
    attributes: { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': tool.name, 'gen_ai.tool.call.id': tool.callId },
  }, async (span) => {
    // Metrics label unknown tool names (the model's invention) as one value, so the label stays bounded.
    const label = tool.known ? tool.name : 'unknown';
    try {
      const { text, ok } = await run();
      if (!ok) span.setStatus({ code: SpanStatusCode.ERROR, message: text.slice(0, 200) });
      observer?.toolCall?.({ tool: label, outcome: ok ? 'ok' : 'error', seconds: (performance.now() - t0) / 1000 });
      return text;
    } catch (err) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
      observer?.toolCall?.({ tool: label, outcome: 'aborted', seconds: (performance.now() - t0) / 1000 });
      throw err;
    } finally {
      span.end();
    }
  });
}

// runAgent against the real scripted model server (OpenAI-compatible, streaming), through the openai client.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SCRIPTED_MODEL_NAME, startScriptedModel } from '@cadre/scripted-model';
import type { ScriptedModel } from '@cadre/scripted-model';
import { builtinTools, createModelClient, resolveTools, runAgent } from './index.ts';
import type { AgentHooks, AgentSpec, AgentTool } from './index.ts';

const API_KEY = 'sk-test-key-not-secret';
let model: ScriptedModel;

beforeAll(async () => {
  model = await startScriptedModel({ apiKey: API_KEY });
});

afterAll(async () => {
  await model?.close();
});

function spec(overrides: Partial<AgentSpec> = {}): AgentSpec {
  return {
    role: 'researcher',
    instructions: 'Answer the assignment.',
    model: SCRIPTED_MODEL_NAME,
    tools: resolveTools(['calculate', 'current_time', 'wait']),
    maxTurns: 5,
    timeoutMs: 20_000,
    ...overrides,
  };
}

/** Hooks that record what the caller's durable log would receive. */
function recordingHooks(extra: Partial<AgentHooks> = {}): AgentHooks & { events: string[] } {
  const events: string[] = [];
  return {
    events,
    async onTurn(turn) {
      events.push(`turn ${turn}`);
      await extra.onTurn?.(turn);
    },
    async onToolCall(call) {
      events.push(`tool ${call.tool} ${call.arguments}`);
      await extra.onToolCall?.(call);
    },
  };
}

function client(maxRetries = 0) {
  return createModelClient({ baseURL: model.url, apiKey: API_KEY, maxRetries });
}

const call = (name: string, args: unknown) => `[[scripted:call=${name}(${JSON.stringify(args)})]]`;

describe('runAgent', () => {
  it('returns the plain answer with usage after one turn', async () => {
    const hooks = recordingHooks();
    const outcome = await runAgent({
      client: client(),
      spec: spec(),
      input: 'Summarise the plan',
      signal: new AbortController().signal,
      hooks,
    });
    expect(outcome).toMatchObject({ ok: true, result: 'Scripted answer to "Summarise the plan"', turns: 1 });
    expect(outcome.usage.prompt_tokens).toBeGreaterThan(0);
    expect(outcome.usage.completion_tokens).toBeGreaterThan(0);
    expect(outcome.usage.total_tokens).toBe(outcome.usage.prompt_tokens + outcome.usage.completion_tokens);
    expect(hooks.events).toEqual(['turn 1']);
  });

  it('runs a tool call and feeds the result back to the model', async () => {
    const hooks = recordingHooks();
    const outcome = await runAgent({
      client: client(),
      spec: spec(),
      input: `What is six times seven?\n${call('calculate', { expression: '6*7' })}`,
      signal: new AbortController().signal,
      hooks,
    });
    expect(hooks.events).toEqual(['turn 1', 'tool calculate {"expression":"6*7"}', 'turn 2']);
    expect(outcome).toMatchObject({
      ok: true,
      result: 'Scripted answer to "What is six times seven?" using 1 tool result(s): 42',
      turns: 2,
    });
  });

  it('reports an unknown tool or a failing tool to the model, which still finishes', async () => {
    const failing: AgentTool = {
      name: 'flaky',
      description: 'always fails',
      parameters: { type: 'object', properties: {} },
      run: async () => {
        throw new Error('disk full');
      },
    };
    const outcome = await runAgent({
      client: client(),
      spec: spec({ tools: [builtinTools.calculate!, failing] }),
      input: `Try the shell\n${call('shell', { cmd: 'ls' })}${call('flaky', {})}`,
      signal: new AbortController().signal,
      hooks: recordingHooks(),
    });
    expect(outcome.ok).toBe(true);
    if (!outcome.ok) return;
    expect(outcome.result).toContain('error: unknown tool "shell"');
    expect(outcome.result).toContain('error: disk full');
    expect(outcome.turns).toBe(3);
  });

  it('tells each of two identical calls in one turn its own call id', async () => {
    // The scripted model asks for spawn_worker once per role in one response: two roles alike make two calls
    // with the same name and arguments.
    const seen: { args: unknown; callId: string }[] = [];
    const twin: AgentTool = {
      name: 'spawn_worker',
      description: 'records its calls',
      parameters: { type: 'object', properties: { role: { type: 'string' } } },
      run: async (args, ctx) => {
        seen.push({ args, callId: ctx.callId });
        return `done ${ctx.callId}`;
      },
    };
    const announced: string[] = [];
    const outcome = await runAgent({
      client: client(),
      spec: spec({ tools: [twin] }),
      input: 'Split the work [[scripted:spawn=analyst,analyst]]',
      signal: new AbortController().signal,
      hooks: recordingHooks({ onToolCall: async (c) => void announced.push(c.callId) }),
    });
    expect(outcome.ok).toBe(true);
    expect(announced).toHaveLength(2);
    expect(new Set(announced).size).toBe(2);
    expect(seen.map((s) => s.args)).toEqual([seen[0]!.args, seen[0]!.args]);
    expect(seen.map((s) => s.callId).sort()).toEqual([...announced].sort());
    if (outcome.ok) expect(outcome.result).toContain(`done ${announced[0]}; done ${announced[1]}`);
  });

  it('cancel reaches a running tool within a second', async () => {
    const controller = new AbortController();
    let abortedAt = 0;
    const hooks = recordingHooks({
      async onToolCall() {
        setTimeout(() => {
          abortedAt = performance.now();
          controller.abort();
        }, 200);
      },
    });
    const outcome = await runAgent({
      client: client(),
      spec: spec(),
      input: `Wait a minute\n${call('wait', { ms: 60_000 })}`,
      signal: controller.signal,
      hooks,
    });
    const lag = performance.now() - abortedAt;
    expect(outcome).toMatchObject({ ok: false, reason: 'cancelled', turns: 1 });
    expect(hooks.events).toEqual(['turn 1', 'tool wait {"ms":60000}']);
    expect(lag).toBeLessThan(1000);
  });

  it('cancel reaches a hanging model stream within a second', async () => {
    const controller = new AbortController();
    const abortedAt = performance.now() + 200;
    setTimeout(() => controller.abort(), 200);
    const outcome = await runAgent({
      client: client(),
      spec: spec(),
      input: 'Think forever\n[[scripted:hang]]',
      signal: controller.signal,
      hooks: recordingHooks(),
    });
    expect(outcome).toMatchObject({ ok: false, reason: 'cancelled', turns: 1 });
    expect(performance.now() - abortedAt).toBeLessThan(1000);
  });

  it('cancel reaches a stream that is mid-answer', async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('operator stop')), 200);
    const outcome = await runAgent({
      client: client(),
      spec: spec(),
      input: 'Answer slowly\n[[scripted:chunk_delay=5000]]',
      signal: controller.signal,
      hooks: recordingHooks(),
    });
    expect(outcome).toMatchObject({ ok: false, reason: 'cancelled', message: 'cancelled: operator stop' });
  });

  it('times out a hanging model after the spec timeout', async () => {
    const started = performance.now();
    const outcome = await runAgent({
      client: client(),
      spec: spec({ timeoutMs: 300 }),
      input: 'Think forever\n[[scripted:hang]]',
      signal: new AbortController().signal,
      hooks: recordingHooks(),
    });
    expect(outcome).toMatchObject({ ok: false, reason: 'timeout', message: 'timed out after 300 ms' });
    expect(performance.now() - started).toBeLessThan(1300);
  });

  it('fails with model_error when the API keeps failing', async () => {
    const outcome = await runAgent({
      client: client(0),
      spec: spec(),
      input: 'Busy?\n[[scripted:fail=429]]',
      signal: new AbortController().signal,
      hooks: recordingHooks(),
    });
    expect(outcome).toMatchObject({ ok: false, reason: 'model_error', turns: 1 });
    if (outcome.ok) return;
    expect(outcome.message).toContain('429');
    expect(outcome.message).not.toContain(API_KEY);
  });

  it('rides out transient 5xx through the client retries', async () => {
    const requestsBefore = model.requestCount();
    const outcome = await runAgent({
      client: client(3),
      spec: spec(),
      input: 'Flaky upstream\n[[scripted:fail=500*2]]',
      signal: new AbortController().signal,
      hooks: recordingHooks(),
    });
    expect(outcome).toMatchObject({ ok: true, result: 'Scripted answer to "Flaky upstream"', turns: 1 });
    expect(model.requestCount() - requestsBefore).toBe(3);
  });

  it('stops with max_turns when the model still calls tools on the last turn', async () => {
    const hooks = recordingHooks();
    const outcome = await runAgent({
      client: client(),
      spec: spec({ maxTurns: 1 }),
      input: `Compute\n${call('calculate', { expression: '1+1' })}`,
      signal: new AbortController().signal,
      hooks,
    });
    expect(outcome).toMatchObject({ ok: false, reason: 'max_turns', turns: 1 });
    expect(outcome.usage.total_tokens).toBeGreaterThan(0);
    expect(hooks.events).toEqual(['turn 1']);
  });

  it('rethrows a hook error and runs no further step', async () => {
    let ran = false;
    const probe: AgentTool = {
      name: 'probe',
      description: 'records that it ran',
      parameters: { type: 'object', properties: {} },
      run: async () => {
        ran = true;
        return 'ran';
      },
    };
    const fenced = new Error('lease lost');
    const hooks = recordingHooks({
      async onToolCall() {
        throw fenced;
      },
    });
    await expect(
      runAgent({
        client: client(),
        spec: spec({ tools: [probe] }),
        input: `Probe\n${call('probe', {})}`,
        signal: new AbortController().signal,
        hooks,
      }),
    ).rejects.toBe(fenced);
    expect(ran).toBe(false);
    expect(hooks.events).toEqual(['turn 1', 'tool probe {}']);

    const onTurn = recordingHooks({
      async onTurn() {
        throw fenced;
      },
    });
    await expect(
      runAgent({ client: client(), spec: spec(), input: 'Hi', signal: new AbortController().signal, hooks: onTurn }),
    ).rejects.toBe(fenced);
  });
});

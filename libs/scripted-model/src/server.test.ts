import OpenAI from 'openai';
import type { ChatCompletionMessageParam, ChatCompletionTool } from 'openai/resources/chat/completions';
import { afterEach, describe, expect, it } from 'vitest';
import { startScriptedModel, type ScriptedModel, type ScriptedModelOptions } from './index.ts';

const opened: ScriptedModel[] = [];

async function start(opts: ScriptedModelOptions = {}): Promise<{ model: ScriptedModel; client: OpenAI }> {
  const model = await startScriptedModel({ port: 0, ...opts });
  opened.push(model);
  return { model, client: new OpenAI({ baseURL: model.url, apiKey: opts.apiKey ?? 'x', maxRetries: 0 }) };
}

afterEach(async () => {
  await Promise.all(opened.splice(0).map((model) => model.close()));
});

const spawnTool: ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'spawn_worker',
    parameters: { type: 'object', properties: { role: { type: 'string' }, instructions: { type: 'string' } } },
  },
};

/** Reads a stream the way a client does: content and tool-call deltas assembled by index. */
async function collect(stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>) {
  let content = '';
  let finishReason: string | null = null;
  let usage: OpenAI.CompletionUsage | null | undefined;
  let contentChunks = 0;
  const calls: { id: string; name: string; arguments: string; fragments: number }[] = [];
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.delta.content) {
      content += choice.delta.content;
      contentChunks += 1;
    }
    for (const delta of choice.delta.tool_calls ?? []) {
      const call = (calls[delta.index] ??= { id: '', name: '', arguments: '', fragments: 0 });
      if (delta.id) call.id = delta.id;
      if (delta.function?.name) call.name = delta.function.name;
      if (delta.function?.arguments) {
        call.arguments += delta.function.arguments;
        call.fragments += 1;
      }
    }
    if (choice.finish_reason) finishReason = choice.finish_reason;
  }
  return { content, contentChunks, calls, finishReason, usage };
}

describe('scripted model through the openai client', () => {
  it('lists cadre-scripted', async () => {
    const { client } = await start();
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['cadre-scripted']);
  });

  it('answers with the first line of the last user message and counts usage', async () => {
    const { client } = await start();
    const messages: ChatCompletionMessageParam[] = [
      { role: 'system', content: 'You are terse.' }, // 14 chars
      { role: 'user', content: 'Summarise the report\nsecond line is ignored' }, // 43 chars
    ];
    const completion = await client.chat.completions.create({ model: 'any-model', messages });
    const content = 'Scripted answer to "Summarise the report"';
    expect(completion.object).toBe('chat.completion');
    expect(completion.model).toBe('any-model');
    expect(completion.choices[0]?.message).toMatchObject({ role: 'assistant', content });
    expect(completion.choices[0]?.finish_reason).toBe('stop');
    expect(completion.usage).toEqual({
      prompt_tokens: Math.ceil(57 / 4),
      completion_tokens: Math.ceil(content.length / 4),
      total_tokens: Math.ceil(57 / 4) + Math.ceil(content.length / 4),
    });
  });

  it('streams the same text in several chunks, with usage when asked', async () => {
    const { client } = await start();
    const messages: ChatCompletionMessageParam[] = [{ role: 'user', content: 'Plan a launch for the new product line' }];
    const whole = await client.chat.completions.create({ model: 'm', messages });
    const stream = await client.chat.completions.create({
      model: 'm',
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    const streamed = await collect(stream);
    expect(streamed.content).toBe(whole.choices[0]?.message.content);
    expect(streamed.contentChunks).toBeGreaterThan(1);
    expect(streamed.finishReason).toBe('stop');
    expect(streamed.usage).toEqual(whole.usage);
  });

  it('streams parallel spawn_worker calls that assemble into JSON, default roles', async () => {
    const { client } = await start();
    const stream = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'Compare Redis and Postgres queues' }],
      tools: [spawnTool],
      stream: true,
    });
    const { calls, finishReason } = await collect(stream);
    expect(finishReason).toBe('tool_calls');
    expect(calls.map((c) => [c.id, c.name])).toEqual([
      ['call_0_0', 'spawn_worker'],
      ['call_0_1', 'spawn_worker'],
    ]);
    expect(calls.every((c) => c.fragments >= 2)).toBe(true);
    expect(calls.map((c) => JSON.parse(c.arguments))).toEqual([
      { role: 'researcher', instructions: 'researcher: work on: Compare Redis and Postgres queues' },
      { role: 'critic', instructions: 'critic: work on: Compare Redis and Postgres queues' },
    ]);
  });

  it('spawns the roles named by spawn= and agrees with the stream helper', async () => {
    const { client } = await start();
    const params = {
      model: 'm',
      messages: [
        { role: 'system', content: 'Coordinate. [[scripted:spawn=analyst,writer,editor]]' },
        { role: 'user', content: 'Write the brief' },
      ] satisfies ChatCompletionMessageParam[],
      tools: [spawnTool],
    };
    const whole = await client.chat.completions.create(params);
    const final = await client.chat.completions.stream(params).finalChatCompletion();
    const roles = (calls: typeof whole.choices[0]['message']['tool_calls']) =>
      (calls ?? []).map((c) => (c.type === 'function' ? JSON.parse(c.function.arguments).role : undefined));
    expect(roles(whole.choices[0]?.message.tool_calls)).toEqual(['analyst', 'writer', 'editor']);
    expect(final.choices[0]?.message.tool_calls).toEqual(whole.choices[0]?.message.tool_calls);
    expect(final.choices[0]?.finish_reason).toBe('tool_calls');
  });

  it('walks call= directives one per turn, then answers with the tool results', async () => {
    const { client } = await start();
    const messages: ChatCompletionMessageParam[] = [
      {
        role: 'user',
        content: 'Check the weather\n[[scripted:call=lookup({"city":"Oslo"})]] [[scripted:call=convert({"unit":"C"})]]',
      },
    ];
    const results = ['Oslo: 4 degrees and raining', 'x'.repeat(100)];
    for (const [turn, expected] of [
      ['lookup', '{"city":"Oslo"}'],
      ['convert', '{"unit":"C"}'],
    ].entries()) {
      const completion = await client.chat.completions.create({ model: 'm', messages });
      const message = completion.choices[0]!.message;
      expect(completion.choices[0]?.finish_reason).toBe('tool_calls');
      expect(message.tool_calls).toEqual([
        { id: `call_${turn}_0`, type: 'function', function: { name: expected[0], arguments: expected[1] } },
      ]);
      messages.push(message, { role: 'tool', tool_call_id: `call_${turn}_0`, content: results[turn]! });
    }
    const final = await client.chat.completions.create({ model: 'm', messages });
    expect(final.choices[0]?.finish_reason).toBe('stop');
    expect(final.choices[0]?.message.content).toBe(
      `Scripted answer to "Check the weather" using 2 tool result(s): Oslo: 4 degrees and raining; ${'x'.repeat(60)}`,
    );
  });

  it('surfaces fail=429 as a RateLimitError', async () => {
    const { client } = await start();
    const request = client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'hi [[scripted:fail=429]]' }],
    });
    await expect(request).rejects.toBeInstanceOf(OpenAI.RateLimitError);
    await expect(request).rejects.toMatchObject({ status: 429, code: 'rate_limit_exceeded' });
  });

  it('lets a retrying client through fail=500*2', async () => {
    const { model, client } = await start();
    const retrying = client.withOptions({ maxRetries: 3 });
    const completion = await retrying.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'flaky [[scripted:fail=500*2]]' }],
    });
    expect(completion.choices[0]?.message.content).toBe('Scripted answer to "flaky [[scripted:fail=500*2]]"');
    expect(model.requestCount()).toBe(3);
  });

  it('hang: the client can abort, and close() still resolves', async () => {
    const { model, client } = await start();
    const controller = new AbortController();
    const request = client.chat.completions.create(
      { model: 'm', messages: [{ role: 'user', content: 'wait [[scripted:hang]]' }] },
      { signal: controller.signal },
    );
    setTimeout(() => controller.abort(), 50);
    await expect(request).rejects.toBeInstanceOf(OpenAI.APIUserAbortError);
    await model.close();
  });

  it('hold: the answer waits at its gate until the test releases it; later requests pass', async () => {
    const { model, client } = await start();
    const ask = () => client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Go [[scripted:hold=gate]]' }] });
    let answered = false;
    const held = ask().then((completion) => {
      answered = true;
      return completion;
    });
    await model.holding('gate');
    // The request is at the gate: a round trip of another request later, still unanswered.
    await client.models.list();
    expect(answered).toBe(false);
    model.release('gate');
    expect((await held).choices[0]?.message.content).toBe('Scripted answer to "Go [[scripted:hold=gate]]"');
    expect((await ask()).choices[0]?.message.content).toBe('Scripted answer to "Go [[scripted:hold=gate]]"');
  });

  it('hold: close() ends a request waiting at its gate', async () => {
    const { model, client } = await start();
    const request = client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Go [[scripted:hold=never]]' }] });
    await model.holding('never');
    await model.close();
    await expect(request).rejects.toThrow();
  });

  it('hang: close() ends a hanging stream the client is still reading', async () => {
    const { model, client } = await start();
    const stream = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'wait [[scripted:hang]]' }],
      stream: true,
    });
    const reading = collect(stream);
    await model.close();
    await expect(reading).rejects.toThrow();
  });

  it('chunk_delay: a client can abort mid-stream', async () => {
    const { client } = await start();
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      {
        model: 'm',
        messages: [{ role: 'user', content: 'one two three four five six seven [[scripted:chunk_delay=100]]' }],
        stream: true,
      },
      { signal: controller.signal },
    );
    // The openai stream ends its iteration quietly when its signal aborts.
    let seen = 0;
    for await (const _chunk of stream) {
      seen += 1;
      if (seen === 2) controller.abort();
    }
    expect(seen).toBe(2);
  });

  it('rejects a wrong API key with 401', async () => {
    const { model } = await start({ apiKey: 'right-key' });
    const wrong = new OpenAI({ baseURL: model.url, apiKey: 'wrong-key', maxRetries: 0 });
    await expect(wrong.models.list()).rejects.toMatchObject({ status: 401, code: 'invalid_api_key' });
    const right = new OpenAI({ baseURL: model.url, apiKey: 'right-key', maxRetries: 0 });
    await expect(right.models.list()).resolves.toBeDefined();
  });
});

describe('scripted model over plain HTTP', () => {
  const post = (model: ScriptedModel, body: string) =>
    fetch(`${model.url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });

  it('answers 400 with the OpenAI error shape for malformed JSON and missing messages', async () => {
    const { model } = await start();
    for (const body of ['{"model": "m", "messages": [', '{"model": "m"}']) {
      const res = await post(model, body);
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({
        error: { message: expect.any(String), type: 'invalid_request_error', param: null, code: null },
      });
    }
  });

  it('answers 400 invalid_directive for a directive it cannot parse', async () => {
    const { model } = await start();
    const res = await post(model, JSON.stringify({ messages: [{ role: 'user', content: '[[scripted:fial=500]]' }] }));
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { code: 'invalid_directive' } });
  });

  it('answers 404 for unknown paths', async () => {
    const { model } = await start();
    const res = await fetch(`${model.url}/completions`, { method: 'POST', body: '{}' });
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ error: { type: 'invalid_request_error' } });
  });

  it('ends the SSE stream with [DONE] after the usage chunk', async () => {
    const { model } = await start();
    const res = await post(
      model,
      JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } }),
    );
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const events = (await res.text()).split('\n\n').filter(Boolean);
    expect(events.at(-1)).toBe('data: [DONE]');
    const usageChunk = JSON.parse(events.at(-2)!.slice('data: '.length));
    expect(usageChunk).toMatchObject({ object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 1, completion_tokens: 6, total_tokens: 7 } });
  });
});

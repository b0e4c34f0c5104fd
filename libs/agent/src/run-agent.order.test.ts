// Parts of the loop the scripted model cannot provoke: several tool calls in one response, streamed as fragments.
import type OpenAI from 'openai';
import type { ChatCompletionChunk, ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import { describe, expect, it } from 'vitest';
import { runAgent } from './index.ts';
import type { AgentTool } from './index.ts';

type Request = { messages: ChatCompletionMessageParam[] };

/** A client whose create() streams the given chunks per call and records each request's messages. */
function fakeClient(responses: Partial<ChatCompletionChunk>[][]): { client: OpenAI; requests: Request[] } {
  const requests: Request[] = [];
  const create = async (body: Request) => {
    requests.push({ messages: structuredClone(body.messages) });
    const chunks = responses[requests.length - 1] ?? [];
    return (async function* () {
      for (const chunk of chunks) yield { choices: [], ...chunk };
    })();
  };
  return { client: { apiKey: 'k', chat: { completions: { create } } } as unknown as OpenAI, requests };
}

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function tool(name: string, ms: number, log: string[]): AgentTool {
  return {
    name,
    description: name,
    parameters: { type: 'object', properties: {} },
    run: async (args) => {
      await delay(ms);
      log.push(name);
      return `${name}:${JSON.stringify(args)}`;
    },
  };
}

describe('runAgent with several tool calls in one response', () => {
  it('assembles fragmented calls and returns results in the model order, not finishing order', async () => {
    const finished: string[] = [];
    const calls: string[] = [];
    const { client, requests } = fakeClient([
      [
        { choices: [{ index: 0, finish_reason: null, delta: { tool_calls: [{ index: 0, id: 'a', type: 'function', function: { name: 'slow', arguments: '{"n"' } }] } }] },
        { choices: [{ index: 0, finish_reason: null, delta: { tool_calls: [{ index: 1, id: 'b', type: 'function', function: { name: 'fast', arguments: '' } }] } }] },
        { choices: [{ index: 0, finish_reason: null, delta: { tool_calls: [{ index: 0, function: { arguments: ':1}' } }, { index: 1, function: { arguments: 'not json' } }] } }] },
        { choices: [{ index: 0, finish_reason: 'tool_calls', delta: {} }] },
        { usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } },
      ],
      [
        { choices: [{ index: 0, finish_reason: null, delta: { content: 'done' } }] },
        { choices: [{ index: 0, finish_reason: null, delta: { content: ' here' } }] },
        { choices: [{ index: 0, finish_reason: 'stop', delta: {} }] },
        { usage: { prompt_tokens: 20, completion_tokens: 2, total_tokens: 22 } },
      ],
    ]);
    const outcome = await runAgent({
      client,
      spec: { role: 'r', instructions: 'i', model: 'm', tools: [tool('slow', 50, finished), tool('fast', 0, finished)], maxTurns: 3, timeoutMs: 5_000 },
      input: 'go',
      signal: new AbortController().signal,
      hooks: {
        onTurn: async () => {},
        onToolCall: async (call) => {
          calls.push(`${call.callId} ${call.tool} ${call.arguments}`);
        },
      },
    });

    expect(outcome).toEqual({ ok: true, result: 'done here', usage: { prompt_tokens: 30, completion_tokens: 7, total_tokens: 37 }, turns: 2 });
    expect(calls).toEqual(['a slow {"n":1}', 'b fast not json']);
    expect(finished).toEqual(['slow']); // fast never ran: its arguments are not JSON
    const second = requests[1]!.messages;
    expect(second[0]).toEqual({ role: 'system', content: 'You are the r agent in a Cadre team.\ni' });
    expect(second.slice(2)).toEqual([
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'a', type: 'function', function: { name: 'slow', arguments: '{"n":1}' } },
          { id: 'b', type: 'function', function: { name: 'fast', arguments: 'not json' } },
        ],
      },
      { role: 'tool', tool_call_id: 'a', content: 'slow:{"n":1}' },
      { role: 'tool', tool_call_id: 'b', content: expect.stringMatching(/^error: arguments for fast are not valid JSON/) },
    ]);
  });

  it('keeps model order when the first call finishes last', async () => {
    const finished: string[] = [];
    const toolCall = (index: number, id: string, name: string) => ({
      choices: [{ index: 0, finish_reason: 'tool_calls' as const, delta: { tool_calls: [{ index, id, type: 'function' as const, function: { name, arguments: '{}' } }] } }],
    });
    const { client, requests } = fakeClient([
      [toolCall(0, 'a', 'slow'), toolCall(1, 'b', 'fast')],
      [{ choices: [{ index: 0, finish_reason: 'stop', delta: { content: 'ok' } }] }],
    ]);
    await runAgent({
      client,
      spec: { role: 'r', instructions: 'i', model: 'm', tools: [tool('slow', 50, finished), tool('fast', 0, finished)], maxTurns: 3, timeoutMs: 5_000 },
      input: 'go',
      signal: new AbortController().signal,
      hooks: { onTurn: async () => {}, onToolCall: async () => {} },
    });
    expect(finished).toEqual(['fast', 'slow']);
    expect(requests[1]!.messages.slice(3).map((m) => (m.role === 'tool' ? m.tool_call_id : m.role))).toEqual(['a', 'b']);
  });

  it('fails with tool_error when a tool aborts on its own', async () => {
    const { client } = fakeClient([
      [{ choices: [{ index: 0, finish_reason: 'tool_calls', delta: { tool_calls: [{ index: 0, id: 'a', type: 'function', function: { name: 'fetcher', arguments: '{}' } }] } }] }],
    ]);
    const fetcher: AgentTool = {
      name: 'fetcher',
      description: 'aborts its own request',
      parameters: { type: 'object', properties: {} },
      run: async () => {
        throw Object.assign(new Error('request aborted'), { name: 'AbortError' });
      },
    };
    const outcome = await runAgent({
      client,
      spec: { role: 'r', instructions: 'i', model: 'm', tools: [fetcher], maxTurns: 3, timeoutMs: 5_000 },
      input: 'go',
      signal: new AbortController().signal,
      hooks: { onTurn: async () => {}, onToolCall: async () => {} },
    });
    expect(outcome).toMatchObject({ ok: false, reason: 'tool_error', turns: 1 });
  });

  it('treats a stream that ends without a finish_reason as a model error, not a short answer', async () => {
    const { client } = fakeClient([[{ choices: [{ index: 0, finish_reason: null, delta: { content: 'half an ans' } }] }]]);
    const outcome = await runAgent({
      client,
      spec: { role: 'r', instructions: 'i', model: 'm', tools: [], maxTurns: 3, timeoutMs: 5_000 },
      input: 'go',
      signal: new AbortController().signal,
      hooks: { onTurn: async () => {}, onToolCall: async () => {} },
    });
    expect(outcome).toMatchObject({ ok: false, reason: 'model_error' });
    expect((outcome as { message: string }).message).toMatch(/finish_reason/);
  });
});


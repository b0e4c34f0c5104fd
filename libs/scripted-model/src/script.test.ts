import { describe, expect, it } from 'vitest';
import { DirectiveError, parseDirectives, type ChatMessage } from './directives.ts';
import { fragments, wordGroups } from './openai-format.ts';
import { planReply } from './script.ts';

const user = (content: unknown): ChatMessage => ({ role: 'user', content });

describe('parseDirectives', () => {
  it('reads every directive from system, developer and user messages, text parts included', () => {
    const directives = parseDirectives([
      { role: 'system', content: '[[scripted:fail=503*2]] [[scripted:delay=5]]' },
      { role: 'developer', content: [{ type: 'text', text: '[[scripted:chunk_delay=7]]' }] },
      user('[[scripted:spawn=a, b]] [[scripted:call=t1({"x":[1]})]] [[scripted:call=t2()]] [[scripted:hang]] [[scripted:hold=gate-1]] [[scripted:think=Hmm, let me see]] [[scripted:words=12]]'),
      { role: 'assistant', content: '[[scripted:fail=500]]' },
      { role: 'tool', content: '[[scripted:fail=500]]' },
    ]);
    expect(directives).toEqual({
      fail: { status: 503, times: 2 },
      hang: true,
      hold: 'gate-1',
      delayMs: 5,
      chunkDelayMs: 7,
      spawnRoles: ['a', 'b'],
      calls: [
        { name: 't1', arguments: '{"x":[1]}' },
        { name: 't2', arguments: '{}' },
      ],
      parallel: false,
      think: 'Hmm, let me see',
      words: 12,
    });
  });

  it('makes the remaining calls in one response with parallel, in directive order', () => {
    const text = '[[scripted:parallel]] [[scripted:call=a({"n":1})]] [[scripted:call=b({"n":2})]]';
    const first = planReply([user(text)], [], parseDirectives([user(text)]));
    expect(first.toolCalls.map((c) => [c.id, c.name, c.arguments])).toEqual([['call_0_0', 'a', '{"n":1}'], ['call_0_1', 'b', '{"n":2}']]);
    const after = planReply([user(text), { role: 'assistant' }, { role: 'tool', content: '1' }, { role: 'tool', content: '2' }], [], parseDirectives([user(text)]));
    expect(after.finishReason).toBe('stop');
  });

  it('streams thinking before the answer and makes long answers', () => {
    const reply = planReply([user('Story [[scripted:think=Plot first]] [[scripted:words=25]]')], [], parseDirectives([user('[[scripted:think=Plot first]] [[scripted:words=25]]')]));
    expect(reply.thinking).toBe('Plot first');
    expect(reply.content!.split(' ').length).toBeGreaterThan(25);
    expect(reply.content).toContain('w24');
  });

  it('lets a later fail directive override an earlier one', () => {
    expect(parseDirectives([user('[[scripted:fail=500]]'), user('[[scripted:fail=429]]')]).fail).toEqual({
      status: 429,
      times: undefined,
    });
  });

  it.each(['fial=500', 'fail=200', 'fail=500*0', 'delay=soon', 'spawn=a,,b', 'call=bad name({})', 'call=t({x})', 'call=t([1])', 'think=', 'words=many', 'hold=', 'hold=a b'])(
    'rejects %s',
    (text) => {
      expect(() => parseDirectives([user(`[[scripted:${text}]]`)])).toThrow(DirectiveError);
    },
  );
});

describe('planReply', () => {
  const spawnTool = { type: 'function', function: { name: 'spawn_worker' } };
  const none = parseDirectives([]);

  it('quotes at most 80 characters of the first line of the last user message', () => {
    const long = 'y'.repeat(100);
    const reply = planReply([user('old question'), user(`${long}\nmore`)], [], none);
    expect(reply.content).toBe(`Scripted answer to "${'y'.repeat(80)}"`);
  });

  it('stops spawning once a tool result is in the conversation', () => {
    const messages: ChatMessage[] = [user('go'), { role: 'assistant', content: null }, { role: 'tool', content: 'done' }];
    const reply = planReply(messages, [spawnTool], none);
    expect(reply).toMatchObject({ finishReason: 'stop', content: 'Scripted answer to "go" using 1 tool result(s): done' });
  });

  it('numbers tool call ids by assistant turn', () => {
    const directives = parseDirectives([user('[[scripted:call=a()]] [[scripted:call=b()]]')]);
    const messages: ChatMessage[] = [
      user('[[scripted:call=a()]] [[scripted:call=b()]]'),
      { role: 'assistant', content: null },
      { role: 'tool', content: 'r' },
    ];
    expect(planReply(messages, [], directives).toolCalls).toEqual([{ id: 'call_1_0', name: 'b', arguments: '{}' }]);
  });

  it('counts usage in characters over four, at least one token each', () => {
    const reply = planReply([{ role: 'system', content: '' }, user('')], [], none);
    expect(reply.usage).toEqual({ prompt_tokens: 1, completion_tokens: 6, total_tokens: 7 });
  });
});

describe('stream splitting', () => {
  it('word groups join back to the exact text', () => {
    const text = 'Scripted answer to "a  b\tc" using 1 tool result(s): x ';
    expect(wordGroups(text, 3).join('')).toBe(text);
    expect(wordGroups(text, 3).length).toBeGreaterThan(1);
  });

  it('splits even the shortest arguments into two fragments without breaking code points', () => {
    expect(fragments('{}', 3)).toEqual(['{', '}']);
    expect(fragments('{"e":"😀😀"}', 3).join('')).toBe('{"e":"😀😀"}');
  });
});

import { describe, expect, it } from 'vitest';
import { approvalGrant, evaluatePolicy, policyProblem, type ApprovalRule } from './approval-policy.ts';

describe('approval policy', () => {
  it('matches rules on top-level arguments: equals (deep, key order free), glob, regex; all conditions must hold', () => {
    const rules: ApprovalRule[] = [
      { tool: 'calculate', when: { expression: { glob: '*/0*' } }, action: 'deny', reason: 'no division by zero' },
      { tool: 'fetch', when: { url: { regex: '^https://intranet\\.' }, opts: { equals: { b: 1, a: [1, 2] } } }, action: 'ask', timeout_secs: 5 },
      { tool: 'calc*', action: 'allow' },
    ];
    expect(evaluatePolicy(rules, 'calculate', '{"expression":"1/0"}')).toEqual({ action: 'deny', reason: 'no division by zero' });
    expect(evaluatePolicy(rules, 'calculate', '{"expression":"6*7"}')).toEqual({ action: 'allow' });
    expect(evaluatePolicy(rules, 'fetch', '{"url":"https://intranet.x/a","opts":{"a":[1,2],"b":1}}')).toEqual({ action: 'ask', reason: 'the policy asks before fetch', timeout_secs: 5 });
    // One condition fails (the array's order matters), or the argument is missing: the rule does not match.
    expect(evaluatePolicy(rules, 'fetch', '{"url":"https://intranet.x/a","opts":{"a":[2,1],"b":1}}')).toEqual({ action: 'allow' });
    expect(evaluatePolicy(rules, 'fetch', '{"url":"https://intranet.x/a"}')).toEqual({ action: 'allow' });
    // Arguments that are not a JSON object match no rule with conditions.
    expect(evaluatePolicy(rules, 'calculate', 'not json')).toEqual({ action: 'allow' });
    // A glob or regex never matches a non-string.
    expect(evaluatePolicy(rules, 'calculate', '{"expression":10}')).toEqual({ action: 'allow' });
  });

  it('asks before the host tools by default, unless a rule said otherwise first', () => {
    expect(evaluatePolicy([], 'shell', '{"cmd":"ls"}')).toMatchObject({ action: 'ask', reason: 'shell runs commands on the host' });
    expect(evaluatePolicy([], 'write_file', '{}')).toMatchObject({ action: 'ask' });
    expect(evaluatePolicy([], 'read_file', '{}')).toEqual({ action: 'allow' });
    expect(evaluatePolicy([{ tool: 'shell', when: { cmd: { equals: 'ls' } }, action: 'allow' }], 'shell', '{"cmd":"ls"}')).toEqual({ action: 'allow' });
    expect(evaluatePolicy([{ tool: 'shell', when: { cmd: { equals: 'ls' } }, action: 'allow' }], 'shell', '{"cmd":"rm -rf /"}')).toMatchObject({ action: 'ask' });
  });

  it('a grant is the same for the same call written another way, and differs for other arguments or tools', () => {
    expect(approvalGrant('t', '{"a":1,"b":[1,{"y":2,"x":1}]}')).toBe(approvalGrant('t', '{ "b": [1, {"x":1,"y":2}], "a": 1 }'));
    expect(approvalGrant('t', '{"a":1}')).not.toBe(approvalGrant('t', '{"a":2}'));
    expect(approvalGrant('t', '{"a":1}')).not.toBe(approvalGrant('u', '{"a":1}'));
  });

  it('names what a schema cannot check: a condition with no or two kinds, a regex that does not compile', () => {
    expect(policyProblem([{ tool: 'x', action: 'ask', when: { a: { glob: '*' } } }])).toBeNull();
    expect(policyProblem([{ tool: 'x', action: 'ask', when: { a: { regex: '(' } } }])).toMatch(/^rules\[0\]\.when\.a\.regex does not compile/);
    expect(policyProblem([{ tool: 'x', action: 'ask', when: { a: { glob: '*', regex: 'a' } as never } }])).toBe('rules[0].when.a must have exactly one of equals, glob, regex');
  });
});

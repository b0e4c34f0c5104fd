import { createHash } from 'node:crypto';

/**
 * How one top-level argument of a call must look for a rule to match (exactly one key):
 *   equals: the argument is this JSON value (deep equality; object key order does not matter)
 *   glob:   the argument is a string matching this glob (`*` any run of characters, `?` one; whole string)
 *   regex:  the argument is a string this JavaScript regular expression finds (unanchored: add ^…$ yourself)
 * A missing argument, or a non-string under glob/regex, does not match.
 */
export type ArgumentMatch = { equals: unknown } | { glob: string } | { regex: string };

/** One rule of an approval policy; the first rule whose `tool` glob and `when` match a call decides it. */
export interface ApprovalRule {
  /** Glob over the tool's name: `*` matches any run of characters, `?` one character. */
  tool: string;
  /** Conditions on the call's top-level arguments, all of which must hold (absent: any arguments). */
  when?: Record<string, ArgumentMatch>;
  action: 'allow' | 'ask' | 'deny';
  /** How long an `ask` waits before it is denied with "approval timed out". */
  timeout_secs?: number;
  /** Shown to the operator (ask) or to the model (deny). */
  reason?: string;
}

export interface ApprovalPolicy {
  rules: ApprovalRule[];
}

export const DEFAULT_APPROVAL_TIMEOUT_SECS = 600;

/**
 * Checked after every configured rule: tools that touch the host ask unless a rule said otherwise (a workspace
 * that trusts them adds `{tool: "shell", action: "allow"}`). Anything else no rule matches is allowed.
 */
export const DEFAULT_APPROVAL_RULES: readonly ApprovalRule[] = Object.freeze([
  { tool: 'shell', action: 'ask', reason: 'shell runs commands on the host' },
  { tool: 'write_file', action: 'ask', reason: 'write_file changes files on the host' },
]);

/** What a policy says about one call. No matching rule: allow (the documented default). */
export type PolicyVerdict = { action: 'allow' } | { action: 'deny'; reason: string } | { action: 'ask'; reason: string; timeout_secs: number };

/**
 * The verdict of the first rule matching the call, the defaults (DEFAULT_APPROVAL_RULES) after `rules` unless
 * `defaults: false` (VM runs: their shell and files are the VM's, a sandbox provisioned for the run).
 * `args` is the call's arguments as the model sent them (JSON text); arguments that are not a JSON object match
 * no rule with a `when` (the tool refuses them anyway).
 */
export function evaluatePolicy(rules: readonly ApprovalRule[], tool: string, args?: string, opts: { defaults?: boolean } = {}): PolicyVerdict {
  const parsed = args === undefined ? undefined : parseArgs(args);
  const rule = [...rules, ...(opts.defaults === false ? [] : DEFAULT_APPROVAL_RULES)].find((r) => globMatches(r.tool, tool) && whenMatches(r.when, parsed));
  if (!rule || rule.action === 'allow') return { action: 'allow' };
  if (rule.action === 'deny') return { action: 'deny', reason: rule.reason ?? `the policy denies ${tool}` };
  return { action: 'ask', reason: rule.reason ?? `the policy asks before ${tool}`, timeout_secs: rule.timeout_secs ?? DEFAULT_APPROVAL_TIMEOUT_SECS };
}

export function globMatches(glob: string, name: string): boolean {
  const pattern = glob.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[\\s\\S]*').replace(/\?/g, '[\\s\\S]');
  return new RegExp(`^${pattern}$`).test(name);
}

function whenMatches(when: ApprovalRule['when'], args: Record<string, unknown> | null | undefined): boolean {
  // Rules are stored through Lua's cjson, which turns an empty object into an empty array: both mean "no condition".
  if (!when || typeof when !== 'object' || Object.keys(when).length === 0) return true;
  if (!args) return false;
  return Object.entries(when).every(([name, match]) => Object.hasOwn(args, name) && argumentMatches(match, args[name]));
}

function argumentMatches(match: ArgumentMatch, value: unknown): boolean {
  if ('equals' in match) return canonicalJson(value) === canonicalJson(match.equals);
  if (typeof value !== 'string') return false;
  if ('glob' in match) return globMatches(match.glob, value);
  return new RegExp(match.regex).test(value);
}

function parseArgs(args: string): Record<string, unknown> | null {
  try {
    const v: unknown = args.trim() === '' ? {} : JSON.parse(args);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** JSON with object keys sorted, so equal values have one text whatever order the model wrote them in. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`);
    return `{${entries.join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * What an approval "for the rest of the task/session" grants: this tool with these arguments (compared as
 * canonical JSON; arguments that are not JSON, as text). A short hash, so a grant costs a few bytes.
 */
export function approvalGrant(tool: string, args: string): string {
  const parsed = parseArgs(args);
  const text = parsed ? canonicalJson(parsed) : args;
  return createHash('sha256').update(tool).update('\n').update(text).digest('base64url').slice(0, 22);
}

/**
 * Why a set of rules cannot be stored (null: it can): a `when` that is not one of equals/glob/regex, a regex that
 * does not compile. The HTTP schema checks shapes; this checks what a schema cannot.
 */
export function policyProblem(rules: readonly ApprovalRule[], what = 'rules'): string | null {
  for (const [i, rule] of rules.entries()) {
    for (const [name, match] of Object.entries(rule.when ?? {})) {
      const where = `${what}[${i}].when.${name}`;
      const kinds = Object.keys(match ?? {});
      if (kinds.length !== 1 || !['equals', 'glob', 'regex'].includes(kinds[0]!)) return `${where} must have exactly one of equals, glob, regex`;
      if ('regex' in match) {
        try {
          new RegExp(match.regex);
        } catch (err) {
          return `${where}.regex does not compile: ${(err as Error).message}`;
        }
      }
    }
  }
  return null;
}

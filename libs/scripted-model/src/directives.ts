// Directives steer the scripted model from inside a prompt: `[[scripted:<directive>]]` tokens in system,
// developer or user messages. The grammar is documented in ../README.md; keep the two in step.

export type FailDirective = {
  status: number;
  /** Fail only the first `times` identical requests; undefined means every request fails. */
  times: number | undefined;
};

export type CallDirective = { name: string; arguments: string };

export type Directives = {
  fail: FailDirective | undefined;
  hang: boolean;
  /** A gate the answer waits at until the test releases it (`ScriptedModel.release`); undefined for none. */
  hold: string | undefined;
  delayMs: number;
  chunkDelayMs: number;
  /** Roles for spawn_worker calls; undefined means the default roles. */
  spawnRoles: string[] | undefined;
  calls: CallDirective[];
  /** The remaining calls come in one response (parallel tool calls) instead of one per response. */
  parallel: boolean;
  /** Reasoning streamed before the answer (as `reasoning_content` deltas); '' for none. */
  think: string;
  /** Extra words appended to the final answer, for long answers. */
  words: number;
};

/** A directive that does not parse; the server answers 400 with code `invalid_directive`. */
export class DirectiveError extends Error {
  readonly code = 'invalid_directive';
}

/** A chat message as far as the scripted model reads it; everything else is passed over. */
export type ChatMessage = { role: string; content?: unknown };

const TOKEN = /\[\[scripted:(.*?)\]\]/g;
const DIRECTIVE_ROLES = new Set(['system', 'developer', 'user']);
const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** The text of a message's content: a string, or the `text` parts of an array joined by newlines. */
export function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  const texts: string[] = [];
  for (const part of content) {
    if (isRecord(part) && typeof part.text === 'string') texts.push(part.text);
  }
  return texts.join('\n');
}

/** Collects every directive in message order. Later fail/hold/delay/chunk_delay/spawn tokens override earlier ones. */
export function parseDirectives(messages: readonly ChatMessage[]): Directives {
  const directives: Directives = {
    fail: undefined,
    hang: false,
    hold: undefined,
    delayMs: 0,
    chunkDelayMs: 0,
    spawnRoles: undefined,
    calls: [],
    parallel: false,
    think: '',
    words: 0,
  };
  for (const message of messages) {
    if (!DIRECTIVE_ROLES.has(message.role)) continue;
    for (const match of contentText(message.content).matchAll(TOKEN)) {
      applyDirective(directives, (match[1] ?? '').trim());
    }
  }
  return directives;
}

function applyDirective(directives: Directives, text: string): void {
  if (text === 'hang') {
    directives.hang = true;
    return;
  }
  if (text === 'parallel') {
    directives.parallel = true;
    return;
  }
  const eq = text.indexOf('=');
  const name = eq === -1 ? text : text.slice(0, eq);
  const value = eq === -1 ? '' : text.slice(eq + 1).trim();
  switch (name) {
    case 'fail': {
      const m = /^(\d{3})(?:\*(\d+))?$/.exec(value);
      const status = Number(m?.[1]);
      if (!m || status < 400 || status > 599) {
        throw new DirectiveError(`fail expects <status 400-599> or <status>*<n>, got "${value}"`);
      }
      const times = m[2] === undefined ? undefined : Number(m[2]);
      if (times === 0) throw new DirectiveError('fail=<status>*<n> needs n >= 1');
      directives.fail = { status, times };
      return;
    }
    case 'delay':
      directives.delayMs = parseMillis(name, value);
      return;
    case 'hold':
      if (!TOOL_NAME.test(value)) throw new DirectiveError(`hold expects a name of [A-Za-z0-9_-] (1-64), got "${value}"`);
      directives.hold = value;
      return;
    case 'chunk_delay':
      directives.chunkDelayMs = parseMillis(name, value);
      return;
    case 'spawn': {
      const roles = value.split(',').map((role) => role.trim());
      if (roles.some((role) => role === '')) throw new DirectiveError(`spawn expects role,role,... got "${value}"`);
      directives.spawnRoles = roles;
      return;
    }
    case 'call':
      directives.calls.push(parseCall(value));
      return;
    case 'think':
      if (value === '') throw new DirectiveError('think expects the reasoning text, e.g. think=Let me see');
      directives.think = value;
      return;
    case 'words': {
      const words = parseMillis(name, value);
      if (words > 100_000) throw new DirectiveError(`words expects at most 100000, got ${words}`);
      directives.words = words;
      return;
    }
    default:
      throw new DirectiveError(`unknown scripted directive "${text}"`);
  }
}

function parseMillis(name: string, value: string): number {
  if (!/^\d+$/.test(value)) throw new DirectiveError(`${name} expects a whole number, got "${value}"`);
  return Number(value);
}

function parseCall(value: string): CallDirective {
  const m = /^([^(\s]+)\s*\((.*)\)$/s.exec(value);
  if (!m || !TOOL_NAME.test(m[1] ?? '')) {
    throw new DirectiveError(`call expects <tool>(<json args>) with a tool name of [A-Za-z0-9_-], got "${value}"`);
  }
  const name = m[1] ?? '';
  const rawArgs = (m[2] ?? '').trim();
  if (rawArgs === '') return { name, arguments: '{}' };
  let args: unknown;
  try {
    args = JSON.parse(rawArgs);
  } catch {
    throw new DirectiveError(`call=${name}(...) arguments are not valid JSON: ${rawArgs}`);
  }
  if (!isRecord(args)) throw new DirectiveError(`call=${name}(...) arguments must be a JSON object`);
  return { name, arguments: JSON.stringify(args) };
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

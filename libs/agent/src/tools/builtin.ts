import { setTimeout as sleep } from 'node:timers/promises';
import type { AgentTool } from '../types.ts';
import { calculateTool } from './calculate.ts';

export const MAX_WAIT_MS = 60_000;

export const currentTimeTool: AgentTool = {
  name: 'current_time',
  description: 'The current date and time as an ISO 8601 UTC timestamp.',
  parameters: { type: 'object', properties: {}, additionalProperties: false },
  async run(_args, ctx) {
    ctx.signal.throwIfAborted();
    return new Date().toISOString();
  },
};

export const waitTool: AgentTool = {
  name: 'wait',
  description: `Wait for the given number of milliseconds (at most ${MAX_WAIT_MS}).`,
  parameters: {
    type: 'object',
    properties: { ms: { type: 'number', minimum: 0, maximum: MAX_WAIT_MS } },
    required: ['ms'],
    additionalProperties: false,
  },
  async run(args, ctx) {
    const ms = (args as { ms?: unknown } | null)?.ms;
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0 || ms > MAX_WAIT_MS) {
      throw new Error(`"ms" must be a number from 0 to ${MAX_WAIT_MS}`);
    }
    // Rejects with an AbortError the moment the run is cancelled.
    await sleep(ms, undefined, { signal: ctx.signal });
    return `waited ${ms} ms`;
  },
};

/** Tools that are safe to run inside the server process; a spec names them by key. */
export const builtinTools: Record<string, AgentTool> = Object.freeze({
  [calculateTool.name]: calculateTool,
  [currentTimeTool.name]: currentTimeTool,
  [waitTool.name]: waitTool,
});

export class UnknownToolError extends Error {
  override name = 'UnknownToolError';
  readonly code = 'unknown_tool';
  readonly names: string[];

  constructor(names: string[]) {
    super(`unknown tool${names.length === 1 ? '' : 's'}: ${names.join(', ')}; known: ${Object.keys(builtinTools).join(', ')}`);
    this.names = names;
  }
}

/** The builtin tools with these names, in the given order without duplicates. */
export function resolveTools(names: string[]): AgentTool[] {
  const unique = [...new Set(names)];
  const unknown = unique.filter((name) => !Object.hasOwn(builtinTools, name));
  if (unknown.length > 0) throw new UnknownToolError(unknown);
  return unique.map((name) => builtinTools[name] as AgentTool);
}

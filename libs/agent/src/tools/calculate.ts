// Arithmetic for the `calculate` tool: a recursive-descent parser over
//   expr  := term (('+' | '-') term)*
//   term  := unary (('*' | '/' | '%') unary)*
//   unary := ('+' | '-') unary | atom
//   atom  := number | '(' expr ')'
// Never eval: the model's text is data, not code.

import type { AgentTool } from '../types.ts';

export const MAX_EXPRESSION_LENGTH = 1_000;
const MAX_DEPTH = 100;

export class CalculationError extends Error {
  override name = 'CalculationError';
}

export function evaluateArithmetic(expression: string): number {
  if (expression.length > MAX_EXPRESSION_LENGTH) {
    throw new CalculationError(`expression is longer than ${MAX_EXPRESSION_LENGTH} characters`);
  }
  const parser = new Parser(expression);
  const value = parser.parse();
  if (!Number.isFinite(value)) throw new CalculationError('result is not a finite number');
  return value;
}

/** Trims binary floating-point noise (0.1 + 0.2 → 0.3) without hiding real digits. */
export function formatNumber(value: number): string {
  return String(Number(value.toPrecision(15)));
}

class Parser {
  private readonly text: string;
  private pos = 0;
  private depth = 0;

  constructor(text: string) {
    this.text = text;
  }

  parse(): number {
    this.skipSpace();
    if (this.pos === this.text.length) throw new CalculationError('empty expression');
    const value = this.expr();
    if (this.pos < this.text.length) this.fail(`unexpected "${this.text[this.pos]}"`);
    return value;
  }

  private expr(): number {
    let value = this.term();
    for (let op = this.peek(); op === '+' || op === '-'; op = this.peek()) {
      this.pos++;
      const rhs = this.term();
      value = op === '+' ? value + rhs : value - rhs;
    }
    return value;
  }

  private term(): number {
    let value = this.unary();
    for (let op = this.peek(); op === '*' || op === '/' || op === '%'; op = this.peek()) {
      this.pos++;
      const rhs = this.unary();
      if ((op === '/' || op === '%') && rhs === 0) throw new CalculationError('division by zero');
      value = op === '*' ? value * rhs : op === '/' ? value / rhs : value % rhs;
    }
    return value;
  }

  private unary(): number {
    const op = this.peek();
    if (op === '+' || op === '-') {
      this.pos++;
      const value = this.nested(() => this.unary());
      return op === '-' ? -value : value;
    }
    return this.atom();
  }

  private atom(): number {
    const ch = this.peek();
    if (ch === '(') {
      this.pos++;
      const value = this.nested(() => this.expr());
      if (this.peek() !== ')') this.fail('expected ")"');
      this.pos++;
      return value;
    }
    return this.number();
  }

  private number(): number {
    const match = /^(?:\d+(?:\.\d*)?|\.\d+)/.exec(this.text.slice(this.pos));
    if (!match) {
      this.fail(this.pos < this.text.length ? `unexpected "${this.text[this.pos]}"` : 'unexpected end of expression');
    }
    this.pos += match[0].length;
    this.skipSpace();
    return Number(match[0]);
  }

  private nested(parse: () => number): number {
    if (++this.depth > MAX_DEPTH) throw new CalculationError(`nesting deeper than ${MAX_DEPTH}`);
    try {
      return parse();
    } finally {
      this.depth--;
    }
  }

  /** The next non-space character (consuming the spaces), or undefined at the end. */
  private peek(): string | undefined {
    this.skipSpace();
    return this.text[this.pos];
  }

  private skipSpace(): void {
    while (this.pos < this.text.length && /\s/.test(this.text[this.pos] ?? '')) this.pos++;
  }

  private fail(message: string): never {
    throw new CalculationError(`${message} at position ${this.pos + 1}`);
  }
}

export const calculateTool: AgentTool = {
  name: 'calculate',
  description: 'Evaluate an arithmetic expression: numbers, + - * / %, parentheses. Returns the number.',
  parameters: {
    type: 'object',
    properties: { expression: { type: 'string', description: 'for example "(2 + 3) * 4.5"' } },
    required: ['expression'],
    additionalProperties: false,
  },
  async run(args, ctx) {
    ctx.signal.throwIfAborted();
    const expression = (args as { expression?: unknown } | null)?.expression;
    if (typeof expression !== 'string') throw new Error('"expression" must be a string');
    return formatNumber(evaluateArithmetic(expression));
  },
};

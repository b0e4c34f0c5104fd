import { describe, expect, it } from 'vitest';
import { CalculationError, evaluateArithmetic, formatNumber, MAX_EXPRESSION_LENGTH } from './calculate.ts';

describe('evaluateArithmetic', () => {
  it.each([
    ['6*7', 42],
    ['1 + 2 * 3', 7],
    ['(1 + 2) * 3', 9],
    ['10 - 4 - 3', 3],
    ['100 / 10 / 5', 2],
    ['17 % 5', 2],
    ['-3 * -(2 + 1)', 9],
    ['+4', 4],
    ['2.5 * 4', 10],
    ['.5 + 1.', 1.5],
    ['  ( ( 8 ) )  ', 8],
    ['7 / 2', 3.5],
  ])('%s = %d', (expression, expected) => {
    expect(evaluateArithmetic(expression)).toBe(expected);
  });

  it.each([
    ['', 'empty expression'],
    ['1 +', 'unexpected end of expression'],
    ['(1 + 2', 'expected ")"'],
    ['1 + 2)', 'unexpected ")"'],
    ['2 ** 3', 'unexpected "*"'],
    ['1 / 0', 'division by zero'],
    ['5 % (2 - 2)', 'division by zero'],
    ['process.exit(1)', 'unexpected "p"'],
    ['1e3', 'unexpected "e"'],
    ['1.2.3', 'unexpected "."'],
    ['('.repeat(200) + '1' + ')'.repeat(200), 'nesting deeper than'],
    ['1+'.repeat(MAX_EXPRESSION_LENGTH) + '1', 'longer than'],
  ])('rejects %j', (expression, message) => {
    expect(() => evaluateArithmetic(expression)).toThrow(CalculationError);
    expect(() => evaluateArithmetic(expression)).toThrow(message);
  });

  it('rejects results that overflow', () => {
    expect(() => evaluateArithmetic('9'.repeat(400))).toThrow('not a finite number');
  });
});

describe('formatNumber', () => {
  it('trims floating-point noise but keeps real digits', () => {
    expect(formatNumber(evaluateArithmetic('0.1 + 0.2'))).toBe('0.3');
    expect(formatNumber(evaluateArithmetic('1 / 3'))).toBe('0.333333333333333');
    expect(formatNumber(42)).toBe('42');
  });
});

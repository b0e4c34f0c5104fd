import { describe, expect, it } from 'vitest';
import { ActiveTimeBudget } from './active-time.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('ActiveTimeBudget', () => {
  it('fires once the active time is spent', async () => {
    const budget = new ActiveTimeBudget(50);
    await sleep(120);
    expect(budget.signal.aborted).toBe(true);
    expect((budget.signal.reason as DOMException).name).toBe('TimeoutError');
  });

  it('does not count time spent paused', async () => {
    const budget = new ActiveTimeBudget(400);
    await sleep(50);
    budget.pause();
    await sleep(600); // far past the budget in wall-clock time
    expect(budget.signal.aborted).toBe(false);
    budget.resume();
    await sleep(30);
    expect(budget.signal.aborted).toBe(false);
    await sleep(600);
    expect(budget.signal.aborted).toBe(true);
    budget.dispose();
  });
});

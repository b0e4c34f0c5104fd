import type { Reporter, TestModule } from 'vitest/node';

/** Ends a run with one plain line, `N passed, N failed`, that CI and people can read without vitest's colours. */
export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const count = { passed: 0, failed: 0, skipped: 0 };
    for (const module of testModules) {
      for (const test of module.children.allTests()) {
        const state = test.result().state;
        if (state === 'passed' || state === 'failed' || state === 'skipped') count[state]++;
      }
    }
    process.stdout.write(`\n${count.passed} passed, ${count.failed} failed${count.skipped ? `, ${count.skipped} skipped` : ''}\n`);
  }
}

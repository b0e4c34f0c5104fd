import { defineConfig } from 'vitest/config';

// Unit tests (*.test.ts) sit beside the code; integration tests (*.int.test.ts) start their own redis-server,
// gateway and worker processes, so they get generous timeouts and run in forked processes.
export default defineConfig({
  test: {
    include: ['apps/*/src/**/*.test.ts', 'libs/*/src/**/*.test.ts', 'tests/**/*.test.ts'],
    // Redis Cluster failover tests run in `npm run test:cluster` (vitest.cluster.config.ts).
    exclude: ['tests/cluster/**', '**/node_modules/**'],
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 30_000,
    teardownTimeout: 10_000,
    reporters: ['default', './tests/support/summary-reporter.ts'],
  },
});

import { defineConfig } from 'vitest/config';
import base from './vitest.config.ts';

// `npm run test:cluster`: the integration tests of the store, team tasks, runs, sessions, watch and crashes against
// a local 3-master / 3-replica Redis Cluster (tests/support/cluster-setup.ts), plus the failover tests, which start
// clusters of their own because they kill masters.
export default defineConfig({
  test: {
    ...base.test,
    include: [
      'libs/store/src/**/*.int.test.ts',
      'tests/team-task.int.test.ts',
      'tests/watch-team.int.test.ts',
      'tests/vanished-logs.int.test.ts',
      'tests/cancel-and-crash.int.test.ts',
      'tests/task-reconcile.int.test.ts',
      'tests/runs-api.int.test.ts',
      'tests/runs-control.int.test.ts',
      'tests/stop-all.int.test.ts',
      'tests/task-list.int.test.ts',
      'tests/sessions.int.test.ts',
      'tests/sessions-http.int.test.ts',
      'tests/sessions-crash.int.test.ts',
      'tests/sessions-steering.int.test.ts',
      'tests/session-long-turn.int.test.ts',
      'tests/approvals.int.test.ts',
      'tests/cluster/**/*.test.ts',
    ],
    exclude: [],
    globalSetup: ['tests/support/cluster-setup.ts'],
    // One file at a time: the files share one cluster, and the failover files start clusters of their own; two at
    // once on a 2-core runner starved each other into timeouts (seen in CI: a follow-up chain, a lost-task read).
    fileParallelism: false,
  },
});

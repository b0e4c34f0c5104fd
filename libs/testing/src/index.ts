export { startTestRedis, startRestartableRedis, TEST_CLUSTER_ENV, type RestartableRedis, type TestRedis, type TestRedisClient } from './redis.ts';
export { startTestCluster, withConnection, CLUSTER_NODE_TIMEOUT_MS, type TestCluster } from './redis-cluster.ts';
export { startTestSentinel, type TestSentinel } from './redis-sentinel.ts';
export const TEST_API_KEY = 'test-key-all-workspaces';
export { httpClient, pollUntilTerminal, waitForEvent, grpcClient, watchTeam, rawWatchTeam, encodeWatchTeamRequest, assertContiguous, runsCall, type ApiResponse, type RunsResponse } from './api.ts';
export { isProcessAlive } from './processes.ts';
export { untilStill, waitUntil } from './wait.ts';
export { commandsOf } from './commands-of.ts';
export { dumpRedis, dumpDiff, keysMatching, BACKGROUND_KEYS } from './redis-dump.ts';

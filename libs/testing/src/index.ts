export { startTestRedis, type TestRedis } from './redis.ts';
export const TEST_API_KEY = 'test-key-all-workspaces';
export { httpClient, pollUntilTerminal, waitForEvent, grpcClient, watchTeam, rawWatchTeam, encodeWatchTeamRequest, assertContiguous, runsCall, type ApiResponse, type RunsResponse } from './api.ts';
export { isProcessAlive } from './processes.ts';
export { dumpRedis, dumpDiff, BACKGROUND_KEYS } from './redis-dump.ts';

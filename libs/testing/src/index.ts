export { startTestRedis, type TestRedis } from './redis.ts';
export const TEST_API_KEY = 'test-key-all-workspaces';
export { httpClient, pollUntilTerminal, waitForEvent, grpcClient, watchTeam, assertContiguous, type ApiResponse } from './api.ts';

export { KeyBuilder, type TaskKeys } from './keys.ts';
export { StoreError, type StoreErrorCode } from './errors.ts';
export { TaskStore, workerIdFor, type ClaimResult, type WorkerOutcome, type TaskOutcome, type EventPage, type TaskStoreOptions } from './task-store.ts';
export * from './task-types.ts';
export { EventFanout, LogWatcher, WatchClosedError, type FanoutOptions, type LoggedEvent, type WatchableLog } from './event-fanout.ts';
export { connectRedis } from './connect.ts';
export { TeamQueue, AGENT_QUEUE, AGENT_JOB_OPTIONS, agentJobId, type AgentJobData, type LeadStep } from './team-queue.ts';
export { RunStore, isTerminalRunStatus, type RunStoreOptions, type HeartbeatResult } from './run-store.ts';
export * from './run-types.ts';

// @cadre/session: the session engine every interactive edge shares. SessionEngine is the command side (create,
// message, tool result, register tools, cancel, close, read and watch the log); TurnRunner is the durable turn
// loop the worker pool runs; SessionQueue puts turns and tool deadlines on the agent queue.
export { SessionEngine, parseArguments, type Scope, type StartInput, type MessageInput, type ToolResultInput, type HistoryInput, type SessionEngineDeps, type QueuedInputOutcome } from './session-engine.ts';
export { TurnRunner, type ClaimedTurn, type TurnRunnerDeps, type TurnRunOutcome, type TurnObserver } from './turn-runner.ts';
export { SessionQueue, SESSION_TURN_JOB, TOOL_DEADLINE_JOB, APPROVAL_DEADLINE_JOB, turnJobId, deadlineJobId, approvalDeadlineJobId, type SessionJobData, type SessionTurnJobData, type FailedTurnJob, type FailedSetCursor, type ToolDeadlineJobData, type ApprovalDeadlineJobData } from './session-queue.ts';
export { approvalRules } from './approvals.ts';
export { approvalView, type SessionApprovalView } from '@cadre/store';
export { SessionReadRepair, type SessionReadRepairDeps } from './session-read-repair.ts';
export { SessionEngineError, type SessionErrorCode } from './errors.ts';
export { SESSION_LIMITS } from './limits.ts';
export { clientTools, IMAGE_TYPES, type ImageInput, type ToolInput } from './validate.ts';
export { DeltaBuffer } from './delta-buffer.ts';
export { turnSeconds } from './turn-seconds.ts';

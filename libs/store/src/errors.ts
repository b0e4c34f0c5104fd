// Errors with a stable code; each edge (HTTP, gRPC, BullMQ) maps the code once.

export type StoreErrorCode =
  | 'task_not_found'
  | 'task_finished'
  | 'lease_lost'
  | 'worker_not_found'
  | 'worker_finished'
  | 'cursor_expired'
  | 'cursor_ahead'
  | 'run_not_found'
  | 'run_finished'
  | 'worker_mismatch'
  | 'invalid_state'
  | 'run_cap_reached'
  | 'session_not_found'
  | 'session_closed'
  | 'turn_in_progress'
  | 'no_turn'
  | 'tool_call_not_found'
  | 'tool_call_finished'
  | 'too_many_tools'
  | 'queue_full'
  | 'transcript_changed'
  | 'approval_not_found'
  | 'approval_decided'
  /** A script answered a code no table knows: a bug (a script and its table out of step), never the caller's. */
  | 'unexpected_script_result';

export class StoreError extends Error {
  readonly code: StoreErrorCode;
  constructor(code: StoreErrorCode, message: string) {
    super(message);
    this.name = 'StoreError';
    this.code = code;
  }
}

function unexpectedResult(code: number, what: string): StoreError {
  return new StoreError('unexpected_script_result', `${what}: unexpected script result ${code}`);
}

/** The negative codes the Lua scripts return, in one table. */
export function scriptError(code: number, what: string): StoreError {
  switch (code) {
    case -1:
      return new StoreError('task_not_found', `${what}: task not found`);
    case -2:
      return new StoreError('task_finished', `${what}: task already finished`);
    case -3:
      return new StoreError('lease_lost', `${what}: this attempt no longer holds the worker's lease`);
    case -4:
      return new StoreError('worker_not_found', `${what}: worker not found`);
    case -5:
      return new StoreError('worker_finished', `${what}: worker already finished`);
    default:
      return unexpectedResult(code, what);
  }
}

/** The negative codes of the run scripts (lua/*Run*.lua, heartbeat), in one table. */
export function runScriptError(code: number, what: string): StoreError {
  switch (code) {
    case -1:
      return new StoreError('run_not_found', 'run not found');
    case -2:
      return new StoreError('run_finished', `${what}: the run already ended`);
    case -3:
      return new StoreError('worker_mismatch', `${what}: worker mismatch: this worker does not hold the run`);
    case -6:
      return new StoreError('run_cap_reached', `${what}: the workspace's active-run cap is reached`);
    case -7:
      return new StoreError('invalid_state', `${what}: not allowed in the run's current state`);
    default:
      return unexpectedResult(code, what);
  }
}

/** The negative codes of the session scripts (lua/*Session*.lua, *Turn*.lua, ...), in one table. */
export function sessionScriptError(code: number, what: string): StoreError {
  switch (code) {
    case -1:
      return new StoreError('session_not_found', 'session not found');
    case -2:
      return new StoreError('session_closed', `${what}: the session is closed`);
    case -3:
      return new StoreError('lease_lost', `${what}: this attempt no longer holds the turn`);
    case -8:
      return new StoreError('turn_in_progress', `${what}: a turn is already in progress`);
    case -9:
      return new StoreError('tool_call_not_found', `${what}: no such tool call is waiting in this session's current turn`);
    case -10:
      return new StoreError('tool_call_finished', `${what}: this tool call already has its result`);
    case -13:
      return new StoreError('transcript_changed', `${what}: the transcript changed meanwhile`);
    case -11:
      return new StoreError('too_many_tools', `${what}: the session would have too many client tools`);
    case -12:
      return new StoreError('queue_full', `${what}: too many messages are already queued in this session`);
    default:
      return unexpectedResult(code, what);
  }
}

/** Checks a read cursor against a log: before the oldest retained event, or past the last one, is an error. */
export function checkCursor(afterSeq: number, lastSeq: number, firstReturnedSeq: number | undefined, what: string): void {
  if (firstReturnedSeq !== undefined && firstReturnedSeq > afterSeq + 1) {
    throw new StoreError('cursor_expired', `after_seq ${afterSeq} is older than the retained log (oldest retained seq is ${firstReturnedSeq}); restart from after_seq=${firstReturnedSeq - 1} or refetch the ${what}`);
  }
  if (afterSeq > lastSeq) throw new StoreError('cursor_ahead', `after_seq ${afterSeq} is ahead of the ${what}'s log (last seq ${lastSeq})`);
}

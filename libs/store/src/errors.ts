// Errors with a stable code; each edge (HTTP, gRPC, BullMQ) maps the code once.

/**
 * Every refusal a Lua script can answer, each code one meaning, declared here only. The scripts read them from the
 * `ERR` table of `--@include errors`, which the script loader generates from this table (luaErrorTable), so a
 * script returns `ERR.session_closed`, never a bare number; scriptError decodes them.
 */
export const SCRIPT_ERRORS = {
  task_not_found: { code: -1, text: 'task not found' },
  task_finished: { code: -2, text: 'task already finished' },
  lease_lost: { code: -3, text: 'this attempt no longer holds its lease' },
  worker_not_found: { code: -4, text: 'worker not found' },
  worker_finished: { code: -5, text: 'worker already finished' },
  run_cap_reached: { code: -6, text: "the workspace's active-run cap is reached" },
  invalid_state: { code: -7, text: "not allowed in the run's current state" },
  turn_in_progress: { code: -8, text: 'a turn is already in progress' },
  tool_call_not_found: { code: -9, text: "no such tool call is waiting in this session's current turn" },
  tool_call_finished: { code: -10, text: 'this tool call already has its result' },
  too_many_tools: { code: -11, text: 'the session would have too many client tools' },
  queue_full: { code: -12, text: 'too many messages are already queued in this session' },
  transcript_changed: { code: -13, text: 'the transcript changed meanwhile' },
  run_not_found: { code: -14, text: 'run not found' },
  run_finished: { code: -15, text: 'the run already ended' },
  worker_mismatch: { code: -16, text: 'worker mismatch: this worker does not hold the run' },
  session_not_found: { code: -17, text: 'session not found' },
  session_closed: { code: -18, text: 'the session is closed' },
  approval_not_found: { code: -19, text: 'no such approval' },
  approval_decided: { code: -20, text: 'already decided' },
  tool_call_not_requested: { code: -21, text: 'this tool call was not requested from the client: it waits for its approval, or Cadre runs it' },
} as const satisfies Record<string, { code: number; text: string }>;

export type ScriptErrorCode = keyof typeof SCRIPT_ERRORS;

export type StoreErrorCode =
  | ScriptErrorCode
  | 'cursor_expired'
  | 'cursor_ahead'
  /** A script answered a code the table does not know: a bug (a script and the table out of step), never the caller's. */
  | 'unexpected_script_result';

export class StoreError extends Error {
  readonly code: StoreErrorCode;
  constructor(code: StoreErrorCode, message: string) {
    super(message);
    this.name = 'StoreError';
    this.code = code;
  }
}

const BY_NUMBER = new Map(Object.entries(SCRIPT_ERRORS).map(([name, e]) => [e.code as number, name as ScriptErrorCode]));

/** The StoreError for a script's negative answer; `what` names the operation (it leads the message). */
export function scriptError(code: number, what: string): StoreError {
  const name = BY_NUMBER.get(code);
  if (!name) return new StoreError('unexpected_script_result', `${what}: unexpected script result ${code}`);
  return new StoreError(name, `${what}: ${SCRIPT_ERRORS[name].text}`);
}

/** A second decision of an approval, named with how the first one went (the record the script answered with). */
export function approvalDecided(approvalId: string, status: string): StoreError {
  return new StoreError('approval_decided', `approval ${approvalId} is already ${status}`);
}

/**
 * The Lua include `errors`: SCRIPT_ERRORS as `ERR.<code>`. A plain table: while Redis loads a Functions library its
 * code may call nothing but `redis.register_function` (not setmetatable), so a name the table lacks cannot raise
 * when a call reaches it, as it did in an EVAL script; the library refuses to build instead (unknownErrorNames).
 */
export function luaErrorTable(): string {
  const fields = Object.entries(SCRIPT_ERRORS).map(([name, e]) => `${name} = ${e.code}`);
  return [
    '-- Generated from SCRIPT_ERRORS (libs/store/src/errors.ts) when the scripts load.',
    `local ERR = { ${fields.join(', ')} }`,
    '',
  ].join('\n');
}

/** The `ERR.<name>`s a Lua source names that SCRIPT_ERRORS lacks. */
export function unknownErrorNames(lua: string): string[] {
  return [...lua.matchAll(/\bERR\.(\w+)/g)].map((m) => m[1]!).filter((name) => !Object.hasOwn(SCRIPT_ERRORS, name));
}

/** Checks a read cursor against a log: before the oldest retained event, or past the last one, is an error. */
export function checkCursor(afterSeq: number, lastSeq: number, firstReturnedSeq: number | undefined, what: string): void {
  if (firstReturnedSeq !== undefined && firstReturnedSeq > afterSeq + 1) {
    throw new StoreError('cursor_expired', `after_seq ${afterSeq} is older than the retained log (oldest retained seq is ${firstReturnedSeq}); restart from after_seq=${firstReturnedSeq - 1} or refetch the ${what}`);
  }
  if (afterSeq > lastSeq) throw new StoreError('cursor_ahead', `after_seq ${afterSeq} is ahead of the ${what}'s log (last seq ${lastSeq})`);
}

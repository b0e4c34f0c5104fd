// Errors of the session engine with a stable code; every edge maps the code once (HTTP status, gRPC status,
// roz SessionError in band).
export type SessionErrorCode =
  | 'invalid_argument'
  | 'unprocessable'
  | 'permission_denied'
  | 'not_found'
  | 'session_closed'
  | 'turn_in_progress'
  | 'tool_call_not_found'
  | 'tool_call_finished'
  | 'queue_full'
  /** A second decision on an approval. */
  | 'conflict';

export class SessionEngineError extends Error {
  readonly code: SessionErrorCode;
  constructor(code: SessionErrorCode, message: string) {
    super(message);
    this.name = 'SessionEngineError';
    this.code = code;
  }
}

export const invalid = (message: string): SessionEngineError => new SessionEngineError('invalid_argument', message);

import { status as GrpcStatus } from '@grpc/grpc-js';
import { SessionEngineError } from '@cadre/session';
import { StoreError, WatchClosedError, isRedisOutOfMemory, isRedisUnavailable } from '@cadre/store';

/** Errors the gateway answers with; the code maps once to an HTTP status and once to a gRPC status. */
export type ApiErrorCode =
  | 'invalid_argument'
  | 'unprocessable'
  | 'unauthenticated'
  | 'permission_denied'
  | 'not_found'
  | 'conflict'
  | 'out_of_range'
  | 'resource_exhausted'
  | 'unavailable';

/** What every stream a draining gateway ends says (gRPC UNAVAILABLE, /ws close 1001), as the fan-out's watchers do. */
export { GATEWAY_SHUTTING_DOWN } from '@cadre/store';

export class ApiError extends Error {
  readonly code: ApiErrorCode;
  constructor(code: ApiErrorCode, message: string) {
    super(message);
    this.name = 'ApiError';
    this.code = code;
  }
}

export function httpStatusOf(code: ApiErrorCode): number {
  switch (code) {
    case 'invalid_argument':
      return 400;
    case 'unprocessable':
      return 422;
    case 'unauthenticated':
      return 401;
    case 'permission_denied':
      return 403;
    case 'not_found':
      return 404;
    case 'conflict':
      return 409;
    case 'out_of_range':
      return 410;
    case 'resource_exhausted':
      return 429;
    case 'unavailable':
      return 503;
    default: {
      const never: never = code;
      return never;
    }
  }
}

export function grpcStatusOf(code: ApiErrorCode): GrpcStatus {
  switch (code) {
    case 'invalid_argument':
    case 'unprocessable':
      return GrpcStatus.INVALID_ARGUMENT;
    case 'unauthenticated':
      return GrpcStatus.UNAUTHENTICATED;
    case 'permission_denied':
      return GrpcStatus.PERMISSION_DENIED;
    case 'not_found':
      return GrpcStatus.NOT_FOUND;
    case 'conflict':
      return GrpcStatus.FAILED_PRECONDITION;
    case 'out_of_range':
      return GrpcStatus.OUT_OF_RANGE;
    case 'resource_exhausted':
      return GrpcStatus.RESOURCE_EXHAUSTED;
    case 'unavailable':
      return GrpcStatus.UNAVAILABLE;
    default: {
      const never: never = code;
      return never;
    }
  }
}

/** Store, fan-out and Redis-availability errors as API errors; anything else is not the caller's fault and stays a 500. */
export function toApiError(err: unknown): ApiError | undefined {
  if (err instanceof ApiError) return err;
  if (err instanceof StoreError) {
    switch (err.code) {
      case 'task_not_found':
        return new ApiError('not_found', 'task not found');
      case 'task_finished':
        return new ApiError('conflict', err.message);
      case 'cursor_expired':
      case 'cursor_ahead':
        return new ApiError('out_of_range', err.message);
      case 'run_not_found':
        return new ApiError('not_found', 'Run not found');
      case 'run_finished':
      case 'worker_mismatch':
      case 'invalid_state':
      case 'run_cap_reached':
        return new ApiError('conflict', err.message);
      default:
        return undefined;
    }
  }
  if (err instanceof SessionEngineError) {
    switch (err.code) {
      case 'invalid_argument':
      case 'unprocessable':
      case 'permission_denied':
      case 'not_found':
        return new ApiError(err.code, err.message);
      case 'tool_call_not_found':
        return new ApiError('not_found', err.message);
      case 'session_closed':
      case 'turn_in_progress':
      case 'tool_call_finished':
      case 'queue_full':
      case 'conflict':
        return new ApiError('conflict', err.message);
      default: {
        const never: never = err.code;
        return never;
      }
    }
  }
  if (err instanceof WatchClosedError) {
    switch (err.code) {
      case 'watcher_overflow':
        return new ApiError('resource_exhausted', err.message);
      case 'shutting_down':
        return new ApiError('unavailable', err.message);
      case 'log_gone':
        // Not resumable: the task, session or run is gone, as a new watch of it would be told.
        return new ApiError('not_found', err.message);
      default: {
        const never: never = err.code;
        return never;
      }
    }
  }
  // Redis failing over (or out of reach): the request may succeed when retried, and nothing is known about what
  // it asked for, so neither a 500 nor a 404. The Redis error itself is not shown (it names nodes and keys).
  if (isRedisUnavailable(err)) return new ApiError('unavailable', 'the store is unavailable for the moment (Redis failing over or out of reach); retry');
  // Redis at its maxmemory refused a write or a store function (whole, before it ran): not the caller's fault, and
  // it may succeed once memory is freed. A 500 would say the request itself broke something.
  if (isRedisOutOfMemory(err)) return new ApiError('unavailable', 'the store is out of memory for the moment (Redis reached its maxmemory); retry later');
  return undefined;
}

import * as grpc from '@grpc/grpc-js';
import type { Logger } from '@cadre/observability';
import { AgentServiceService, encodeProtoTeamEvent, type TeamEvent, type WatchTeamRequest } from '@cadre/protocol';
import type { Authenticator } from '../auth.ts';
import { ApiError, grpcStatusOf, toApiError } from '../errors.ts';
import { taskIdFrom, type TaskService } from '../tasks/task-service.ts';
import { streamSession, type SessionStreamDeps } from './session.stream.ts';
import { writable } from '../streams/writable.ts';
import { metadataValue } from './metadata.ts';

export interface AgentServiceDeps {
  auth: Authenticator;
  tasks: TaskService;
  session: Omit<SessionStreamDeps, 'auth' | 'logger'>;
  logger: Logger;
  onWatchStart(): void;
  onWatchEnd(): void;
}

/**
 * roz.v1.AgentService. WatchTeam streams a task's events after `after_seq`, live, and ends after the terminal
 * event (roz's never ends). It waits for `drain` whenever write() returns false, so a slow client costs a
 * bounded buffer, not memory without end.
 */
// Every watcher of a task is handed the same event object by the fan-out, so each event is encoded once and
// its bytes are written to every stream: the WatchTeam response serializer passes encoded bytes through.
const encoded = new WeakMap<TeamEvent, Buffer>();
function encodeOnce(taskId: string, event: TeamEvent): Buffer {
  let bytes = encoded.get(event);
  if (!bytes) {
    bytes = encodeProtoTeamEvent(taskId, event);
    encoded.set(event, bytes);
  }
  return bytes;
}
// A request grpc-js cannot deserialize would end as INTERNAL "Error deserializing request": the decoder is wrapped
// so that bytes that are not a WatchTeamRequest (or an after_seq above 2^53−1, which ts-proto's uint64 → number
// refuses) reach the handler as a refusal it answers with INVALID_ARGUMENT.
type DecodedWatchTeamRequest = WatchTeamRequest & { invalid?: string };
function decodeWatchTeamRequest(bytes: Buffer): DecodedWatchTeamRequest {
  try {
    return AgentServiceService.watchTeam.requestDeserialize(bytes);
  } catch (err) {
    const message = (err as Error).message;
    return {
      taskId: '',
      afterSeq: 0,
      invalid: /MAX_SAFE_INTEGER/.test(message)
        ? `after_seq must be at most ${Number.MAX_SAFE_INTEGER}`
        : `the request is not a roz.v1.WatchTeamRequest (${message.slice(0, 200)})`,
    };
  }
}
const definition = {
  ...AgentServiceService,
  watchTeam: { ...AgentServiceService.watchTeam, requestDeserialize: decodeWatchTeamRequest, responseSerialize: (bytes: Buffer): Buffer => bytes },
};

export function agentService(deps: AgentServiceDeps): { definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation } {
  const watchTeam = async (call: grpc.ServerWritableStream<DecodedWatchTeamRequest, Buffer>): Promise<void> => {
    deps.onWatchStart();
    let watcher: Awaited<ReturnType<TaskService['watch']>> = null;
    const stop = (): void => void watcher?.return();
    call.on('cancelled', stop);
    try {
      const principal = deps.auth.authenticate(metadataValue(call.metadata, 'authorization'));
      if (call.request.invalid) throw new ApiError('invalid_argument', call.request.invalid);
      // Any spelling roz accepts; the events' task_id is the canonical one.
      const taskId = taskIdFrom(call.request.taskId);
      watcher = await deps.tasks.watch(principal, taskId, call.request.afterSeq ?? 0);
      if (call.cancelled) stop();
      if (watcher) {
        const open = watcher;
        // A cancelled call takes nothing more (its 'cancelled' already ended the watcher, which ends the pipe).
        await open.pipeTo((event) => call.cancelled || call.write(encodeOnce(taskId, event)), () => writable(call, 'cancelled', { watcher: open }));
      }
      if (!call.cancelled) call.end();
    } catch (err) {
      const api = toApiError(err);
      if (!api) deps.logger.error({ err }, 'WatchTeam failed');
      if (!call.cancelled) {
        // 'error' (not destroy) is how grpc-js ends a server stream with a status: it records the status and
        // ends the stream, so the trailers carry it.
        call.emit('error', { code: api ? grpcStatusOf(api.code) : grpc.status.INTERNAL, details: api?.message ?? 'internal error' });
      }
    } finally {
      call.off('cancelled', stop);
      void watcher?.return();
      deps.onWatchEnd();
    }
  };
  return {
    definition: definition as unknown as grpc.ServiceDefinition,
    implementation: { watchTeam, streamSession: streamSession({ ...deps.session, auth: deps.auth, logger: deps.logger }) } as unknown as grpc.UntypedServiceImplementation,
  };
}

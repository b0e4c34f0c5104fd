// Maps a logged team event (the HTTP/SSE shape) to the roz.v1.TeamEvent gRPC message, so WatchTeam
// serves the same events with the same seq as the other readers.
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import { TeamEvent as TeamEventProto, type TokenUsage as TokenUsageProto } from './gen/roz/v1/agent.ts';
import { WORKER_PHASES, type TeamEvent, type TokenUsage } from './team-events.ts';

export function toProtoTeamEvent(taskId: string, e: TeamEvent): TeamEventProto {
  const event = toProtoVariant(e);
  // roz's approval messages repeat the task id inside the variant.
  if (event?.$case === 'workerApprovalRequested' || event?.$case === 'workerApprovalResolved') event.value.taskId = taskId;
  return {
    event,
    seq: e.seq,
    timestamp: e.timestamp,
    taskId,
    attempt: e.attempt,
    eventType: e.event_type,
  };
}

/** The roz.v1.TeamEvent wire bytes of a logged event: what WatchTeam writes (once per event, for every watcher). */
export function encodeProtoTeamEvent(taskId: string, e: TeamEvent): Buffer {
  const bytes = TeamEventProto.encode(toProtoTeamEvent(taskId, e), writer).finish();
  if (bytes.byteLength > KEPT_WRITER_BYTES) writer = new BinaryWriter();
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

// One writer for every event (encoding is synchronous). A new writer per event grows its buffer from 128 bytes
// by doubling (five allocations and copies for a 1 KB tool call) before finish() copies the bytes out, and
// Buffer.from(Uint8Array) copied them once more: under a burst, garbage the gateway's heap grew for. finish()
// hands out an exact copy (so a buffer given out is never overwritten), wrapped without another. A writer left
// with a large buffer by an outsized event is replaced, so the one kept stays small.
const KEPT_WRITER_BYTES = 64 * 1024;
let writer = new BinaryWriter();

function toProtoVariant(e: TeamEvent): TeamEventProto['event'] {
  // Task events have no worker; roz's worker variants need one, so '' stands for "none" on the wire.
  const workerId = e.worker_id ?? '';
  switch (e.event_type) {
    case 'worker_started':
      return { $case: 'workerStarted', value: { workerId, hostId: e.payload.host_id, role: e.payload.role } };
    case 'worker_phase': {
      const { phase, mode, turn } = e.payload;
      return { $case: 'workerPhase', value: { workerId, phase: rozPhaseNumber(phase), mode, turn, phaseName: phase } };
    }
    case 'worker_tool_call': {
      const { tool, call_id, arguments: argumentsJson } = e.payload;
      return { $case: 'workerToolCall', value: { workerId, tool, callId: call_id, argumentsJson } };
    }
    case 'worker_completed':
      return {
        $case: 'workerCompleted',
        value: { workerId, result: e.payload.result, usage: toProtoUsage(e.payload.usage) },
      };
    case 'worker_failed':
      return { $case: 'workerFailed', value: { workerId, reason: e.payload.reason, message: e.payload.message } };
    case 'worker_exited':
      return { $case: 'workerExited', value: { workerId, parentTaskId: e.payload.parent_task_id } };
    case 'worker_approval_requested': {
      const { approval_id, tool_name, reason, timeout_secs } = e.payload;
      return { $case: 'workerApprovalRequested', value: { workerId, taskId: '', approvalId: approval_id, toolName: tool_name, reason, timeoutSecs: timeout_secs } };
    }
    case 'worker_approval_resolved': {
      const { approval_id, approved, modifier } = e.payload;
      return { $case: 'workerApprovalResolved', value: { workerId, taskId: '', approvalId: approval_id, approved, ...(modifier && { modifier: JSON.parse(modifier) as Record<string, unknown> }) } };
    }
    case 'task_queued':
      return taskStatus({ status: 'queued' });
    case 'task_completed':
      return taskStatus({ status: 'completed', result: e.payload.result, usage: toProtoUsage(e.payload.usage) });
    case 'task_failed':
      return taskStatus({ status: 'failed', reason: e.payload.reason });
    case 'task_cancelled':
      return taskStatus({ status: 'cancelled', reason: e.payload.reason });
    default: {
      const _never: never = e;
      throw new Error(`unmapped team event type: ${(_never as TeamEvent).event_type}`);
    }
  }
}

/**
 * roz's WorkerPhase.phase is a uint32: the phase's position in the agent's plan. A name this version does not
 * know (a log written by a newer one) reads as the first phase rather than failing the stream.
 */
export function rozPhaseNumber(name: string): number {
  const index = (WORKER_PHASES as readonly string[]).indexOf(name);
  return index === -1 ? 0 : index;
}

function taskStatus(change: {
  status: 'queued' | 'completed' | 'failed' | 'cancelled';
  result?: string;
  reason?: string;
  usage?: TokenUsageProto;
}): TeamEventProto['event'] {
  return {
    $case: 'taskStatusChanged',
    value: { status: change.status, result: change.result ?? '', reason: change.reason ?? '', usage: change.usage },
  };
}

function toProtoUsage(u: TokenUsage): TokenUsageProto {
  return { promptTokens: u.prompt_tokens, completionTokens: u.completion_tokens, totalTokens: u.total_tokens };
}

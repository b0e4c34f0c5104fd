import { describe, expect, it } from 'vitest';
import { TeamEvent as TeamEventProto } from './gen/roz/v1/agent.ts';
import type { TeamEvent, TeamEventPayloads, TeamEventType } from './team-events.ts';
import { TEAM_EVENT_TYPES, WORKER_PHASES } from './team-events.ts';
import { encodeProtoTeamEvent, rozPhaseNumber, toProtoTeamEvent } from './to-proto.ts';

const usage = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 };
const protoUsage = { promptTokens: 10, completionTokens: 5, totalTokens: 15 };
const timestamp = '2025-01-02T03:04:05.678Z';
let nextSeq = 1;

/** A logged event; worker events carry worker w1 on attempt 2, task events have no worker. */
function logged<K extends TeamEventType>(event_type: K, payload: TeamEventPayloads[K]): TeamEvent {
  const isWorkerEvent = event_type.startsWith('worker_');
  const worker_id = isWorkerEvent ? 'w1' : null;
  return { event_type, payload, worker_id, attempt: isWorkerEvent ? 2 : 0, seq: nextSeq++, timestamp } as TeamEvent;
}

const noTaskDetail = { result: '', reason: '', usage: undefined };

// One logged event per type, and the oneof variant it must become.
const cases: Array<{ event: TeamEvent; variant: TeamEventProto['event'] }> = [
  {
    event: logged('task_queued', { workspace_id: 'ws', goal: 'g' }),
    variant: { $case: 'taskStatusChanged', value: { ...noTaskDetail, status: 'queued' } },
  },
  {
    event: logged('worker_started', { host_id: 'h1', role: 'lead' }),
    variant: { $case: 'workerStarted', value: { workerId: 'w1', hostId: 'h1', role: 'lead' } },
  },
  {
    event: logged('worker_phase', { phase: 'waiting_for_workers', mode: 'team', turn: 0 }),
    variant: { $case: 'workerPhase', value: { workerId: 'w1', phase: 1, mode: 'team', turn: 0, phaseName: 'waiting_for_workers' } },
  },
  {
    event: logged('worker_tool_call', { tool: 'search', call_id: 'c1', arguments: '{"q":"x"}' }),
    variant: {
      $case: 'workerToolCall',
      value: { workerId: 'w1', tool: 'search', callId: 'c1', argumentsJson: '{"q":"x"}' },
    },
  },
  {
    event: logged('worker_completed', { result: 'done', usage }),
    variant: { $case: 'workerCompleted', value: { workerId: 'w1', result: 'done', usage: protoUsage } },
  },
  {
    event: logged('worker_failed', { reason: 'timeout', message: 'took too long' }),
    variant: { $case: 'workerFailed', value: { workerId: 'w1', reason: 'timeout', message: 'took too long' } },
  },
  {
    event: logged('worker_exited', { parent_task_id: 't0' }),
    variant: { $case: 'workerExited', value: { workerId: 'w1', parentTaskId: 't0' } },
  },
  {
    event: logged('worker_approval_requested', { approval_id: 'a1', tool_name: 'shell', call_id: 'c1', arguments: '{}', reason: 'host tool', timeout_secs: 30 }),
    variant: { $case: 'workerApprovalRequested', value: { workerId: 'w1', taskId: 'task-1', approvalId: 'a1', toolName: 'shell', reason: 'host tool', timeoutSecs: 30 } },
  },
  {
    event: logged('worker_approval_resolved', { approval_id: 'a1', approved: false, status: 'expired', reason: 'approval timed out', decided_by: '' }),
    variant: { $case: 'workerApprovalResolved', value: { workerId: 'w1', taskId: 'task-1', approvalId: 'a1', approved: false } },
  },
  {
    event: logged('task_completed', { result: 'answer', usage }),
    variant: {
      $case: 'taskStatusChanged',
      value: { status: 'completed', result: 'answer', reason: '', usage: protoUsage },
    },
  },
  {
    event: logged('task_failed', { reason: 'all workers failed' }),
    variant: { $case: 'taskStatusChanged', value: { ...noTaskDetail, status: 'failed', reason: 'all workers failed' } },
  },
  {
    event: logged('task_cancelled', { reason: 'user' }),
    variant: { $case: 'taskStatusChanged', value: { ...noTaskDetail, status: 'cancelled', reason: 'user' } },
  },
];

describe('toProtoTeamEvent', () => {
  it('has a case for every team event type', () => {
    const covered = new Set<TeamEventType>(cases.map((c) => c.event.event_type));
    expect([...covered].sort()).toEqual([...TEAM_EVENT_TYPES].sort());
  });

  it.each(cases)('maps $event.event_type to its oneof variant and the envelope', ({ event, variant }) => {
    const message = toProtoTeamEvent('task-1', event);
    expect(message).toEqual({
      event: variant,
      seq: event.seq,
      timestamp,
      taskId: 'task-1',
      attempt: event.attempt,
      eventType: event.event_type,
    });
  });

  it('survives a wire round trip with the timestamp intact', () => {
    const message = toProtoTeamEvent('task-1', cases[4]!.event);
    const decoded = TeamEventProto.decode(TeamEventProto.encode(message).finish());
    expect(decoded).toEqual(message);
  });

  it("numbers phases as roz does (the position in the agent's plan, from 0) and keeps the name beside it", () => {
    expect(WORKER_PHASES.map((name) => [name, rozPhaseNumber(name)])).toEqual([
      ['thinking', 0],
      ['waiting_for_workers', 1],
      ['synthesizing', 2],
    ]);
    expect(rozPhaseNumber('a phase from a newer version')).toBe(0);
  });
});

describe('encodeProtoTeamEvent', () => {
  // The bytes of every event stay as they were while later events (smaller, larger, outsized) are encoded.
  it('gives each event bytes of its own that later encodings do not overwrite', () => {
    const toolCall = (bytes: number): TeamEvent => logged('worker_tool_call', { tool: 'bench', call_id: `c${bytes}`, arguments: JSON.stringify({ blob: 'x'.repeat(bytes) }) });
    const events = [...cases.map((c) => c.event), toolCall(1_024), toolCall(10), toolCall(200_000), toolCall(1_024), cases[0]!.event];
    const encoded = events.map((event) => encodeProtoTeamEvent('task-1', event));
    expect(encoded.map((bytes) => TeamEventProto.decode(bytes))).toEqual(events.map((event) => toProtoTeamEvent('task-1', event)));
  });
});

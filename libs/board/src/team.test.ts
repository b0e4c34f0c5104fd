import { describe as group, expect, it } from 'vitest';
import { applyEvent, applyRoster, describe, emptyTeam, shownStatus, STALLED_AFTER_MS, tree, type Team, type TeamEventLike } from './index.ts';

// The one team model the board and the CLI both draw: roster + events → tree and statuses.

const T0 = Date.parse('2026-11-23T10:00:00.000Z');
let seq = 0;
/** The next event of the log; it happens seq × 100 ms after T0 unless atMs says when. */
function ev(event_type: string, worker_id: string | null, payload: Record<string, unknown> = {}, atMs?: number): TeamEventLike {
  seq += 1;
  return { seq, timestamp: new Date(T0 + (atMs ?? seq * 100)).toISOString(), event_type, worker_id, attempt: 1, payload };
}

const roster = (status: string, workers: { worker_id: string; role: string; status: string }[], extra: Record<string, unknown> = {}) =>
  ({ task_id: 't-1', goal: 'Compare', status, created_at: new Date(T0).toISOString(), workers, ...extra });

/** A planned team: the lead spawns pro and con, pro calls a tool, both finish, the lead synthesizes. */
function plannedRun(): TeamEventLike[] {
  seq = 0;
  const usage = (n: number) => ({ prompt_tokens: n - 1, completion_tokens: 1, total_tokens: n });
  return [
    ev('task_queued', null, { workspace_id: 'w', goal: 'Compare' }),
    ev('worker_started', 'lead', { role: 'lead', host_id: 'h' }),
    ev('worker_phase', 'lead', { phase: 'thinking', mode: 'plan', turn: 1 }),
    ev('worker_started', 'pro-1', { role: 'pro', host_id: 'h' }),
    ev('worker_started', 'con-2', { role: 'con', host_id: 'h' }),
    ev('worker_phase', 'lead', { phase: 'waiting_for_workers', mode: 'plan', turn: 1 }),
    ev('worker_tool_call', 'pro-1', { tool: 'calculate', call_id: 'c1', arguments: '{"expression":"6*7"}' }),
    ev('worker_completed', 'pro-1', { result: 'yes', usage: usage(10) }),
    ev('worker_failed', 'con-2', { reason: 'model_error', message: 'HTTP 400' }),
    ev('worker_completed', 'lead', { result: 'done', usage: usage(30) }),
    ev('task_completed', null, { result: 'done', usage: usage(40) }),
  ];
}

const statuses = (team: Team) => Object.fromEntries([...team.agents.values()].map((a) => [a.id, a.status]));

group('the team model', () => {
  it('folds a planned team: the lead first, spawned workers in the order they started, each ending and the result', () => {
    const team = emptyTeam();
    applyRoster(team, roster('running', [{ worker_id: 'lead', role: 'lead', status: 'running' }]));
    const events = plannedRun();
    for (const e of events.slice(0, 7)) applyEvent(team, e);
    const { lead, workers } = tree(team);
    expect(lead).toMatchObject({ role: 'lead', status: 'running', phase: 'waiting_for_workers', turn: 1 });
    expect(workers.map((w) => [w.id, w.role, w.status])).toEqual([['pro-1', 'pro', 'waiting on a tool'], ['con-2', 'con', 'running']]);
    expect(workers[0]!.lastTool).toBe('calculate({"expression":"6*7"})');
    expect(team.ended).toBeNull();

    for (const e of events.slice(7)) applyEvent(team, e);
    expect(statuses(team)).toEqual({ lead: 'completed', 'pro-1': 'completed', 'con-2': 'failed' });
    expect(team.agents.get('con-2')!.failure).toBe('model_error');
    expect(team.agents.get('pro-1')).toMatchObject({ tokens: 10, startedAt: T0 + 400, endedAt: T0 + 800 });
    expect(team).toMatchObject({ ended: 'completed', result: 'done', usage: { total_tokens: 40 } });
  });

  it('gives the same team after a reload (stored events, then the resumed rest, then the roster) as in one go', () => {
    const events = plannedRun();
    const once = emptyTeam();
    for (const e of events) applyEvent(once, e);
    const reloaded = emptyTeam();
    for (const e of events.slice(0, 5)) applyEvent(reloaded, e);
    applyRoster(reloaded, roster('running', [{ worker_id: 'lead', role: 'lead', status: 'running' }, { worker_id: 'pro-1', role: 'pro', status: 'running' }]));
    for (const e of events.slice(5)) applyEvent(reloaded, e);
    applyRoster(once, roster('completed', []));
    applyRoster(reloaded, roster('completed', []));
    expect(reloaded).toEqual(once);
  });

  it('shows a worker waiting on an approval until the last of its turn is decided, parked rather than stalled', () => {
    seq = 0;
    const team = emptyTeam();
    applyEvent(team, ev('worker_started', 'calc-1', { role: 'calc', host_id: 'h' }));
    applyEvent(team, ev('worker_approval_requested', 'calc-1', { approval_id: 'a1', tool_name: 'calculate', call_id: 'c1', arguments: '{"expression":"1+1"}', reason: 'check', timeout_secs: 600 }));
    applyEvent(team, ev('worker_approval_requested', 'calc-1', { approval_id: 'a2', tool_name: 'calculate', call_id: 'c2', arguments: '{"expression":"2+2"}', reason: 'check', timeout_secs: 600 }));
    const a = team.agents.get('calc-1')!;
    expect(a.status).toBe('waiting on an approval');
    expect(shownStatus(a, T0 + STALLED_AFTER_MS * 10, false)).toBe('waiting on an approval');
    applyEvent(team, ev('worker_approval_resolved', 'calc-1', { approval_id: 'a1', approved: true, status: 'approved', reason: '', decided_by: 'operator-key' }));
    expect(a.status).toBe('waiting on an approval');
    applyEvent(team, ev('worker_approval_resolved', 'calc-1', { approval_id: 'a2', approved: false, status: 'denied', reason: 'no', decided_by: 'operator-key' }));
    expect(a.status).toBe('running');
    expect(a.lastTool).toBe('calculate({"expression":"2+2"})');
  });

  it('takes a parked worker from the roster before its events arrive, and an ending from a finished task', () => {
    const team = emptyTeam();
    applyRoster(team, roster('running', [{ worker_id: 'lead', role: 'lead', status: 'waiting' }, { worker_id: 'w-1', role: 'w', status: 'pending' }]));
    expect(statuses(team)).toEqual({ lead: 'waiting on an approval', 'w-1': 'pending' });
    applyRoster(team, roster('failed', [{ worker_id: 'lead', role: 'lead', status: 'failed' }, { worker_id: 'w-1', role: 'w', status: 'pending' }], { failure_reason: 'max_turns' }));
    expect(team).toMatchObject({ ended: 'failed', reason: 'max_turns' });
    expect(shownStatus(team.agents.get('w-1')!, T0, true)).toBe('not started');
  });

  it('calls a running agent silent for longer than the threshold stalled, but not once the task ended', () => {
    seq = 0;
    const team = emptyTeam();
    applyEvent(team, ev('worker_started', 'w-1', { role: 'w', host_id: 'h' }, 0));
    const a = team.agents.get('w-1')!;
    expect(shownStatus(a, T0 + STALLED_AFTER_MS, false)).toBe('running');
    expect(shownStatus(a, T0 + STALLED_AFTER_MS + 1, false)).toBe('stalled');
    expect(shownStatus(a, T0 + STALLED_AFTER_MS + 1, true)).toBe('running');
  });

  it('describes each event in a few words on one line', () => {
    const lines = plannedRun().map(describe);
    expect(lines).toEqual([
      'queued: Compare',
      'started as lead on h',
      'thinking (turn 1)',
      'started as pro on h',
      'started as con on h',
      'waiting_for_workers (turn 1)',
      'calls calculate({"expression":"6*7"})',
      'completed (10 tokens): yes',
      'failed: model_error — HTTP 400',
      'completed (30 tokens): done',
      'task completed (40 tokens)',
    ]);
    seq = 0;
    expect(describe(ev('worker_approval_resolved', 'w', { approval_id: 'a', approved: false, status: 'denied', reason: 'not\ntoday', decided_by: 'operator-key' }))).toBe('denied by operator-key: not today');
  });
});

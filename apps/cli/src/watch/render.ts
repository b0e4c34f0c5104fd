import pc from 'picocolors';
import { clip, describe, duration, shownStatus, tree, type Agent, type Team, type TeamEventLike } from '@cadre/board';

// How `task watch` draws the team on a terminal; the team itself is the board's model (@cadre/board).

const colourOf = (status: string): ((s: string) => string) =>
  status === 'completed' ? pc.green : status === 'failed' || status === 'cancelled' ? pc.red : status === 'pending' || status === 'not started' ? pc.dim : status === 'running' ? pc.cyan : pc.yellow;

function agentRow(a: Agent, prefix: string, now: number, ended: boolean): string {
  const status = shownStatus(a, now, ended);
  const took = a.startedAt ? duration((a.endedAt ?? now) - a.startedAt) : '';
  const facts = [
    a.phase ? `${a.phase}${a.turn ? ` t${a.turn}` : ''}` : null,
    a.lastTool ? `tool ${clip(a.lastTool, 44)}` : null,
    a.tokens !== null ? `${a.tokens} tok` : null,
    took || null,
  ].filter(Boolean);
  const shown = status === 'failed' && a.failure ? `failed (${a.failure})` : status;
  return `${prefix}${pc.bold(a.role)} ${pc.dim(a.id)}  ${colourOf(status)(shown)}  ${pc.dim(facts.join(' · '))}`;
}

/** The team as a tree (lead, then its workers), under a header line: what a TTY redraws in place. */
export function renderTree(team: Team, now: number): string {
  const task = team.task!;
  const { lead, workers } = tree(team);
  const status = team.ended ?? (lead && lead.status !== 'pending' ? 'running' : task.status);
  const lines = [
    `${pc.bold('task')} ${task.task_id}  ${colourOf(status)(status)}  ${pc.dim(duration(now - Date.parse(task.created_at)))}`,
    pc.dim(clip(task.goal, 100)),
  ];
  if (lead) lines.push(agentRow(lead, '', now, Boolean(team.ended)));
  workers.forEach((w, i) => lines.push(agentRow(w, i === workers.length - 1 ? '└─ ' : '├─ ', now, Boolean(team.ended))));
  return lines.join('\n');
}

/** One plain line per event, for pipes and logs. */
export function eventLine(e: TeamEventLike): string {
  return `#${e.seq} ${e.timestamp} ${e.worker_id ?? 'task'} ${e.event_type} ${describe(e)}`;
}

export function summary(team: Team): string {
  if (team.ended === 'completed') {
    const u = team.usage;
    return `${pc.green('completed')}${u ? ` — ${u.total_tokens} tokens (${u.prompt_tokens} prompt, ${u.completion_tokens} completion)` : ''}\n${team.result ?? ''}`;
  }
  return `${pc.red(team.ended ?? 'ended')}${team.reason ? `: ${team.reason}` : ''}`;
}

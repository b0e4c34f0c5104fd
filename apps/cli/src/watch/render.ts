import pc from 'picocolors';
import { clip, type AgentLine, type TeamState } from './team.ts';

const colourOf = (status: string): ((s: string) => string) =>
  status === 'completed' ? pc.green : status.startsWith('failed') || status === 'cancelled' ? pc.red : status === 'pending' ? pc.dim : status === 'running' ? pc.cyan : pc.yellow;

export function elapsed(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
}

function agentRow(a: AgentLine, prefix: string, now: number): string {
  const took = a.startedAt ? elapsed((a.endedAt ?? now) - a.startedAt) : '';
  const facts = [
    a.phase ? `${a.phase}${a.turn ? ` t${a.turn}` : ''}` : null,
    a.lastTool ? `tool ${a.lastTool}` : null,
    a.tokens !== null ? `${a.tokens} tok` : null,
    took || null,
  ].filter(Boolean);
  return `${prefix}${pc.bold(a.role)} ${pc.dim(a.id)}  ${colourOf(a.status)(a.status)}  ${pc.dim(facts.join(' · '))}`;
}

/** The team as a tree (lead, then its workers), with a header line: what a TTY redraws in place. */
export function renderTree(team: TeamState, task: { task_id: string; goal: string; created_at: string }, now: number): string {
  const lead = team.agents.get('lead');
  const workers = [...team.agents.values()].filter((a) => a.id !== 'lead');
  const status = team.ended ?? (lead?.status === 'pending' ? 'queued' : 'running');
  const lines = [
    `${pc.bold('task')} ${task.task_id}  ${colourOf(status)(status)}  ${pc.dim(elapsed(now - Date.parse(task.created_at)))}`,
    pc.dim(clip(task.goal, 100)),
  ];
  if (lead) lines.push(agentRow(lead, '', now));
  workers.forEach((w, i) => lines.push(agentRow(w, i === workers.length - 1 ? '└─ ' : '├─ ', now)));
  return lines.join('\n');
}

export function summary(team: TeamState): string {
  if (team.ended === 'completed') {
    const u = team.usage;
    return `${pc.green('completed')}${u ? ` — ${u.total_tokens} tokens (${u.prompt_tokens} prompt, ${u.completion_tokens} completion)` : ''}\n${team.result ?? ''}`;
  }
  return `${pc.red(team.ended ?? 'ended')}${team.reason ? `: ${team.reason}` : ''}`;
}

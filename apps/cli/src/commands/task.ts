import { InvalidArgumentError, type Command } from 'commander';
import logUpdate from 'log-update';
import type { CadreClient, Json } from '../client.ts';
import { EXIT, dash, printJson, printTable, statusColour } from '../output.ts';
import { eventLine, renderTree, summary } from '../watch/render.ts';
import { applyEvent, applyRoster, clip, emptyTeam, followStream, isTerminal } from '@cadre/board';

interface Globals {
  json?: boolean;
  workspace: string;
}

/** `cadre task create | list | get | watch | cancel` */
export function taskCommands(program: Command, client: () => CadreClient): void {
  const task = program.command('task').description('team tasks: create, list, inspect, watch live, cancel');

  task
    .command('create')
    .description('create a task (planned lead unless --worker names the team); prints its id')
    .requiredOption('-g, --goal <text>', 'the team goal')
    .option('--worker <role...>', 'name the team instead of letting the lead plan it (repeatable)')
    .option('--max-workers <n>', 'at most this many workers', (v) => positiveInt(v, '--max-workers'))
    .option('--watch', 'then watch it to its end (exit code as for `task watch`)')
    .action(async (opts: { goal: string; worker?: string[]; maxWorkers?: number; watch?: boolean }, cmd: Command) => {
      const g = cmd.optsWithGlobals<Globals>();
      const team = { ...(opts.worker ? { workers: opts.worker.map((role) => ({ role })) } : {}), ...(opts.maxWorkers ? { max_workers: opts.maxWorkers } : {}) };
      const created = await client().tasks.create({ workspace_id: g.workspace, goal: opts.goal, ...(Object.keys(team).length ? { team } : {}) });
      if (g.json) printJson({ task: created });
      else process.stdout.write(`${created.task_id}\n`);
      if (opts.watch) process.exitCode = await watchTask(client(), created.task_id, 0, Boolean(g.json));
    });

  task
    .command('list')
    .description("the workspace's tasks, newest first")
    .option('-s, --status <status>', 'only tasks with this status (queued, running, completed, failed, cancelled)')
    .option('-n, --limit <n>', 'page size (1..200)', (v) => positiveInt(v, '--limit'), 20)
    .option('--cursor <cursor>', 'the next_cursor of a previous page')
    .action(async (opts: { status?: string; limit: number; cursor?: string }, cmd: Command) => {
      const g = cmd.optsWithGlobals<Globals>();
      const page = await client().tasks.list({ workspace_id: g.workspace, limit: String(opts.limit), ...(opts.status ? { status: opts.status } : {}), ...(opts.cursor ? { cursor: opts.cursor } : {}) });
      if (g.json) return printJson(page);
      printTable(['TASK', 'STATUS', 'TEAM', 'SIZE', 'CREATED', 'GOAL'],
        page.tasks.map((t: Json) => [t.task_id, t.status, t.mode, String(t.team_size), t.created_at, clip(t.goal, 60)]),
        (cell, i) => (i === 1 ? statusColour(cell) : cell));
      if (page.tasks.length === 0) process.stdout.write(`no ${opts.status ? `${opts.status} ` : ''}tasks in ${g.workspace}\n`);
      if (page.next_cursor) process.stdout.write(`more: --cursor ${page.next_cursor}\n`);
    });

  task
    .command('get <task_id>')
    .description('a task, its team and results')
    .action(async (taskId: string, _opts: unknown, cmd: Command) => {
      const g = cmd.optsWithGlobals<Globals>();
      const t = await client().tasks.get(taskId);
      if (g.json) return printJson({ task: t });
      process.stdout.write(`task      ${t.task_id}\nstatus    ${statusColour(t.status)}\nworkspace ${t.workspace_id}\ngoal      ${clip(t.goal, 200)}\nlast seq  ${t.last_seq}\n`);
      if (t.usage) process.stdout.write(`usage     ${t.usage.total_tokens} tokens\n`);
      if (t.failure_reason) process.stdout.write(`reason    ${t.failure_reason}\n`);
      printTable(['WORKER', 'ROLE', 'STATUS', 'ATTEMPT', 'TOKENS'],
        t.workers.map((w: Json) => [w.worker_id, w.role, w.status, String(w.attempt), dash(w.usage?.total_tokens)]),
        (cell, i) => (i === 2 ? statusColour(cell) : cell));
      if (t.result) process.stdout.write(`\n${t.result}\n`);
    });

  task
    .command('watch <task_id>')
    .description('follow a task live to its end: a redrawn tree on a terminal, one line per event when piped, JSON lines with --json; exit 0 completed, 3 failed, 4 cancelled')
    .option('--after-seq <seq>', 'start after this seq', (v) => nonNegativeInt(v, '--after-seq'), 0)
    .action(async (taskId: string, opts: { afterSeq: number }, cmd: Command) => {
      process.exitCode = await watchTask(client(), taskId, opts.afterSeq, Boolean(cmd.optsWithGlobals<Globals>().json));
    });

  task
    .command('cancel <task_id>')
    .description('cancel a queued or running task')
    .option('-r, --reason <text>', 'why', 'cancelled from the cadre CLI')
    .action(async (taskId: string, opts: { reason: string }, cmd: Command) => {
      const t = await client().tasks.cancel(taskId, opts.reason);
      if (cmd.optsWithGlobals<Globals>().json) printJson({ task: t });
      else process.stdout.write(`${t.task_id} ${statusColour(t.status)}\n`);
    });
}

/** Watches a task to its terminal event; resolves with the exit code its ending maps to. */
export async function watchTask(client: CadreClient, taskId: string, afterSeq: number, json: boolean): Promise<number> {
  const team = emptyTeam();
  applyRoster(team, await client.tasks.get(taskId));
  const live = !json && process.stdout.isTTY === true;
  const draw = (): void => logUpdate(renderTree(team, Date.now()));
  const stream = followStream({
    url: `${client.config.url}/api/tasks/${encodeURIComponent(taskId)}/stream`,
    headers: () => client.taskHeaders(),
    afterSeq,
    isTerminal,
    onEvent(e) {
      applyEvent(team, e);
      if (json) process.stdout.write(`${JSON.stringify(e)}\n`);
      else if (live) draw();
      else process.stdout.write(`${eventLine(e)}\n`);
    },
    onState(kind, text) {
      if (kind === 'retrying' && !json) process.stderr.write(`stream: ${text}\n`);
    },
  });
  const stop = (): void => stream.close();
  process.once('SIGINT', stop);
  const ticker = live ? setInterval(draw, 1000) : undefined;
  if (live) draw();
  try {
    const outcome = await stream.done;
    if (outcome.error) throw outcome.error;
  } finally {
    clearInterval(ticker);
    process.off('SIGINT', stop);
    if (live) logUpdate.done();
  }
  // A finished task read from its end has no events left to fold: its ending comes from the task itself.
  if (!team.ended) applyRoster(team, await client.tasks.get(taskId));
  if (!json) process.stdout.write(`${summary(team)}\n`);
  return team.ended === 'completed' ? EXIT.ok : team.ended === 'failed' ? EXIT.taskFailed : team.ended === 'cancelled' ? EXIT.taskCancelled : EXIT.error;
}

export function positiveInt(v: string, name: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${name} must be a positive integer, got "${v}"`);
  return n;
}

function nonNegativeInt(v: string, name: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError(`${name} must be a non-negative integer, got "${v}"`);
  return n;
}

import type { Command } from 'commander';
import type { CadreClient, Json } from '../client.ts';
import { EXIT, dash, printJson, printTable, statusColour } from '../output.ts';
import { clip } from '@cadre/board';

interface Globals {
  json?: boolean;
  workspace: string;
}

const ACTIVE = ['awaiting_worker', 'queued', 'running', 'paused'];

/** `cadre run list | get | pause | resume | stop | control-mode | stop-all` (the VM runs API). */
export function runCommands(program: Command, client: () => CadreClient): void {
  const run = program.command('run').description('VM runs: list, inspect, pause, resume, stop, stop-all');

  run
    .command('list')
    .description("the workspace's runs (active ones and the newest others)")
    .option('-s, --status <status>', 'only runs with this status')
    .action(async (opts: { status?: string }, cmd: Command) => {
      const g = cmd.optsWithGlobals<Globals>();
      const runs = await client().runs.list({ workspace_id: g.workspace, ...(opts.status ? { status: opts.status } : {}) });
      if (g.json) return printJson({ runs });
      printTable(['RUN', 'STATUS', 'MODE', 'AGENT', 'WORKER', 'CREATED', 'QUERY'],
        runs.map((r: Json) => [r.run_id, r.status, dash(r.control_mode), dash(r.agent_id), dash(r.worker_id ?? r.worker?.worker_id), dash(r.created_at), clip(r.query ?? '', 50)]),
        (cell, i) => (i === 1 ? statusColour(cell) : cell));
      if (runs.length === 0) process.stdout.write(`no ${opts.status ? `${opts.status} ` : ''}runs in ${g.workspace}\n`);
    });

  run
    .command('get <run_id>')
    .description('one run')
    .action(async (runId: string, _opts: unknown, cmd: Command) => {
      const r = await client().runs.get(runId);
      if (cmd.optsWithGlobals<Globals>().json) return printJson({ run: r });
      for (const [k, v] of Object.entries(r as Record<string, unknown>)) {
        process.stdout.write(`${k.padEnd(18)}${k === 'status' ? statusColour(String(v)) : typeof v === 'object' && v !== null ? JSON.stringify(v) : dash(v)}\n`);
      }
    });

  for (const action of ['pause', 'resume', 'stop'] as const) {
    run
      .command(`${action} <run_id>`)
      .description(`${action} a run (the bound VM worker obeys on its next heartbeat)`)
      .action(async (runId: string, _opts: unknown, cmd: Command) => printRun(await client().runs.control(runId, action), cmd));
  }

  run
    .command('control-mode <run_id> <mode>')
    .description('set a run\'s control mode: agent_only, shared_control or human_override')
    .action(async (runId: string, mode: string, _opts: unknown, cmd: Command) => printRun(await client().runs.control(runId, 'set-control-mode', mode), cmd));

  run
    .command('stop-all')
    .description('stop every active run and cancel every unfinished team task in the workspace (or everywhere with --all-workspaces); lists what it will stop and needs --yes')
    .option('--all-workspaces', 'every workspace, not only --workspace')
    .option('-y, --yes', 'really stop (without it, only list what would be stopped)')
    .action(async (opts: { allWorkspaces?: boolean; yes?: boolean }, cmd: Command) => {
      const g = cmd.optsWithGlobals<Globals>();
      const c = client();
      if (!opts.yes) {
        // Every workspace stop-all would reach (the gateway's set of them), each listed as the one-workspace form lists.
        const scope = opts.allWorkspaces ? await c.workspaces() : [g.workspace];
        const found = await Promise.all(scope.map((ws) => activeIn(c, ws)));
        const activeRuns = found.flatMap((f) => f.runs);
        const tasks = found.flatMap((f) => f.tasks);
        const where = opts.allWorkspaces ? 'every workspace' : g.workspace;
        if (g.json) {
          printJson({ would_stop: { workspace_id: opts.allWorkspaces ? null : g.workspace, run_ids: activeRuns.map((r: Json) => r.run_id), task_ids: tasks.map((t: Json) => t.task_id) } });
        } else {
          process.stdout.write(`stop-all in ${where} would stop ${activeRuns.length} run(s) and cancel ${tasks.length} task(s):\n`);
          for (const { workspace, runs, tasks: its } of found) {
            if (opts.allWorkspaces && runs.length + its.length > 0) process.stdout.write(` ${workspace}:\n`);
            for (const r of runs) process.stdout.write(`  run  ${r.run_id} ${r.status} ${clip(r.query ?? '', 50)}\n`);
            for (const t of its) process.stdout.write(`  task ${t.task_id} ${t.status} ${clip(t.goal, 50)}\n`);
          }
          process.stderr.write('re-run with --yes to stop them.\n');
        }
        return void (process.exitCode = EXIT.usage);
      }
      const result = await c.runs.stopAll(opts.allWorkspaces ? undefined : g.workspace);
      if (g.json) return printJson(result);
      const runIds: string[] = result.stopped_run_ids ?? [];
      const taskIds: string[] = result.stopped_task_ids ?? [];
      process.stdout.write(`stopped ${runIds.length} run(s) and cancelled ${taskIds.length} task(s)\n`);
      for (const id of runIds) process.stdout.write(`  run  ${id}\n`);
      for (const id of taskIds) process.stdout.write(`  task ${id}\n`);
    });
}

/** What stop-all would stop in one workspace: its active runs, and its running and queued team tasks. */
async function activeIn(c: CadreClient, workspace: string): Promise<{ workspace: string; runs: Json[]; tasks: Json[] }> {
  const [runs, running, queued] = await Promise.all([
    c.runs.list({ workspace_id: workspace }),
    c.tasks.list({ workspace_id: workspace, status: 'running', limit: '200' }),
    c.tasks.list({ workspace_id: workspace, status: 'queued', limit: '200' }),
  ]);
  return { workspace, runs: runs.filter((r: Json) => ACTIVE.includes(r.status)), tasks: [...running.tasks, ...queued.tasks] };
}

function printRun(r: Json, cmd: Command): void {
  if (cmd.optsWithGlobals<Globals>().json) return printJson({ run: r });
  process.stdout.write(`${r.run_id} ${statusColour(r.status)} ${dash(r.control_mode)}\n`);
}

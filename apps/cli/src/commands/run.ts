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
        if (opts.allWorkspaces) {
          process.stderr.write('stop-all --all-workspaces stops every active run and team task in every workspace; re-run with --yes to do it.\n');
          return void (process.exitCode = EXIT.usage);
        }
        const [runs, running, queued] = await Promise.all([
          c.runs.list({ workspace_id: g.workspace }),
          c.tasks.list({ workspace_id: g.workspace, status: 'running', limit: '200' }),
          c.tasks.list({ workspace_id: g.workspace, status: 'queued', limit: '200' }),
        ]);
        const activeRuns = runs.filter((r: Json) => ACTIVE.includes(r.status));
        const tasks = [...running.tasks, ...queued.tasks];
        if (g.json) printJson({ would_stop: { workspace_id: g.workspace, run_ids: activeRuns.map((r: Json) => r.run_id), task_ids: tasks.map((t: Json) => t.task_id) } });
        else {
          process.stdout.write(`stop-all in ${g.workspace} would stop ${activeRuns.length} run(s) and cancel ${tasks.length} task(s):\n`);
          for (const r of activeRuns) process.stdout.write(`  run  ${r.run_id} ${r.status} ${clip(r.query ?? '', 50)}\n`);
          for (const t of tasks) process.stdout.write(`  task ${t.task_id} ${t.status} ${clip(t.goal, 50)}\n`);
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

function printRun(r: Json, cmd: Command): void {
  if (cmd.optsWithGlobals<Globals>().json) return printJson({ run: r });
  process.stdout.write(`${r.run_id} ${statusColour(r.status)} ${dash(r.control_mode)}\n`);
}

import { Option, type Command } from 'commander';
import { ApiError, type CadreClient, type Json } from '../client.ts';
import { EXIT, dash, printJson, printTable, statusColour } from '../output.ts';
import { clip, duration } from '@cadre/board';

interface Globals {
  json?: boolean;
  workspace: string;
}

const STATUSES = ['pending', 'approved', 'denied', 'expired', 'cancelled'];

/** `cadre approvals list | approve | deny` (the tool approvals API). */
export function approvalCommands(program: Command, client: () => CadreClient): void {
  const approvals = program.command('approvals').description('tool approvals: the pending inbox, approve, deny');

  approvals
    .command('list')
    .description("the workspace's approvals (pending ones unless --status says otherwise), oldest first")
    .addOption(new Option('-s, --status <status>', 'only approvals with this status').choices(STATUSES).default('pending'))
    .option('-t, --task <task_id>', 'only this task\'s approvals')
    .option('--session <session_id>', 'only this session\'s (of its current turn; the workspace inbox lists team tasks\' only)')
    .action(async (opts: { status: string; task?: string; session?: string }, cmd: Command) => {
      const g = cmd.optsWithGlobals<Globals>();
      const page = await client().approvals.list({ workspace_id: g.workspace, status: opts.status, ...owner(opts) });
      if (g.json) return printJson(page);
      const now = Date.now();
      printTable(['APPROVAL', 'STATUS', 'TASK', 'WORKER', 'TOOL', 'ARGUMENTS', 'EXPIRES IN', 'REASON'],
        page.approvals.map((a: Json) => [
          a.approval_id, a.status, a.task_id || `session ${a.session_id}`, dash(a.worker_id), a.tool_name, clip(a.arguments ?? '', 40),
          a.status === 'pending' ? duration(a.expires_at - now) : '—', dash(a.reason),
        ]),
        (cell, i) => (i === 1 ? statusColour(cell) : cell));
      if (page.approvals.length === 0) process.stdout.write(`no ${opts.status} approvals in ${g.workspace}\n`);
    });

  for (const verb of ['approve', 'deny'] as const) {
    approvals
      .command(`${verb} [approval_id...]`)
      .description(`${verb} the named pending approvals, or with --all every pending one of the workspace (or of --task); exit 1 if any could not be decided (unknown, or already decided)`)
      .option('-r, --reason <text>', verb === 'deny' ? 'why (the model is told it)' : 'why (kept on the record)')
      .option('--all', `${verb} every pending approval of the workspace (with --task: of that task)`)
      .option('-t, --task <task_id>', 'with --all: only this task\'s approvals')
      .option('--session <session_id>', 'with --all: this session\'s approvals instead')
      .action(async (ids: string[], opts: { reason?: string; all?: boolean; task?: string; session?: string }, cmd: Command) => {
        const g = cmd.optsWithGlobals<Globals>();
        if (Boolean(opts.all) === ids.length > 0 || ((opts.task || opts.session) && !opts.all)) {
          process.stderr.write(`cadre: name the approvals to ${verb}, or give --all (optionally with --task or --session), not both\n`);
          return void (process.exitCode = EXIT.usage);
        }
        const c = client();
        const targets = opts.all ? (await c.approvals.list({ workspace_id: g.workspace, status: 'pending', ...owner(opts) })).approvals.map((a: Json) => a.approval_id as string) : ids;
        if (!targets.length && !g.json) process.stdout.write(`no pending approvals in ${g.workspace}${opts.task ? ` for task ${opts.task}` : opts.session ? ` for session ${opts.session}` : ''}\n`);
        process.exitCode = await decide(c, targets, verb === 'approve', opts.reason, Boolean(g.json));
      });
  }
}

/** The list filter for --task / --session. */
function owner(opts: { task?: string; session?: string }): Record<string, string> {
  return { ...(opts.task ? { task_id: opts.task } : {}), ...(opts.session ? { session_id: opts.session } : {}) };
}

/** Decides each id in turn; one that cannot be decided is reported and the rest still are. */
async function decide(c: CadreClient, ids: string[], approved: boolean, reason: string | undefined, json: boolean): Promise<number> {
  const decided: Json[] = [];
  const failed: { approval_id: string; status: number; message: string }[] = [];
  for (const id of new Set(ids)) {
    try {
      const a = await c.approvals.decide(id, approved, reason);
      decided.push(a);
      if (!json) process.stdout.write(`${a.approval_id} ${statusColour(a.status)} ${a.tool_name} for ${a.worker_id || `session ${a.session_id}`}\n`);
    } catch (err) {
      if (!(err instanceof ApiError) || err.status >= 500) throw err;
      failed.push({ approval_id: id, status: err.status, message: err.message });
      if (!json) process.stderr.write(`cadre: ${id}: ${err.message} (HTTP ${err.status})\n`);
    }
  }
  if (json) printJson({ decided, failed });
  return failed.length ? EXIT.error : EXIT.ok;
}

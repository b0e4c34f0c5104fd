import { Option, type Command } from 'commander';
import type { CadreClient, Json } from '../client.ts';
import { EXIT, dash, printJson, printTable, statusColour } from '../output.ts';
import { clip, duration } from '@cadre/board';
import { positiveInt } from './task.ts';

interface Globals {
  json?: boolean;
  workspace: string;
}

interface Owner {
  task?: string;
  session?: string;
  tool?: string;
}

const STATUSES = ['pending', 'approved', 'denied', 'expired', 'cancelled'];
const SCOPES = ['once', 'task', 'session'];
/** What one POST /api/approvals/decisions decides at most. */
const BULK_MAX = 200;

/** `cadre approvals list | approve | deny` (the tool approvals API; several at once through its bulk decisions). */
export function approvalCommands(program: Command, client: () => CadreClient): void {
  const approvals = program.command('approvals').description('tool approvals: the pending inbox, approve, deny (one, several or all)');

  approvals
    .command('list')
    .description("the workspace's approvals (pending ones unless --status says otherwise), oldest first")
    .addOption(new Option('-s, --status <status>', 'only approvals with this status').choices(STATUSES).default('pending'))
    .option('-t, --task <task_id>', 'only this task\'s approvals')
    .option('--session <session_id>', 'only this session\'s, its earlier turns\' included (without it, a session\'s are listed while pending)')
    .option('--tool <name>', 'only approvals of this tool')
    .option('-n, --limit <n>', 'page size (1..200)', (v) => positiveInt(v, '--limit'), 50)
    .option('--cursor <cursor>', 'the next_cursor of a previous page')
    .action(async (opts: Owner & { status: string; limit: number; cursor?: string }, cmd: Command) => {
      const g = cmd.optsWithGlobals<Globals>();
      const page = await client().approvals.list({
        workspace_id: g.workspace, status: opts.status, limit: String(opts.limit), ...filterOf(opts), ...(opts.cursor ? { cursor: opts.cursor } : {}),
      });
      if (g.json) return printJson(page);
      const now = Date.now();
      printTable(['APPROVAL', 'STATUS', 'TASK', 'WORKER', 'TOOL', 'ARGUMENTS', 'EXPIRES IN', 'REASON'],
        page.approvals.map((a: Json) => [
          a.approval_id, a.status, a.task_id || `session ${a.session_id}`, dash(a.worker_id), a.tool_name, clip(a.arguments ?? '', 40),
          a.status === 'pending' ? duration(a.expires_at - now) : '—', dash(a.reason),
        ]),
        (cell, i) => (i === 1 ? statusColour(cell) : cell));
      if (page.approvals.length === 0) process.stdout.write(`no ${opts.status} approvals in ${g.workspace}\n`);
      if (page.next_cursor) process.stdout.write(`more: --cursor ${page.next_cursor}\n`);
    });

  for (const verb of ['approve', 'deny'] as const) {
    const command = approvals
      .command(`${verb} [approval_id...]`)
      .description(`${verb} the named pending approvals, or with --all every pending one of the workspace (or of --task / --session / --tool); exit 1 if any could not be decided (unknown, or already decided)`)
      .option('-r, --reason <text>', verb === 'deny' ? 'why (the model is told it)' : 'why (kept on the record)')
      .option('--all', `${verb} every pending approval of the workspace, narrowed by --task, --session or --tool`)
      .option('-t, --task <task_id>', 'with --all: only this task\'s approvals')
      .option('--session <session_id>', 'with --all: this session\'s approvals instead')
      .option('--tool <name>', 'with --all: only approvals of this tool');
    if (verb === 'approve') {
      command.addOption(new Option('--scope <scope>', 'once: this call; task / session: the same tool and arguments no longer ask for the rest of the task / session').choices(SCOPES));
    }
    command.action(async (ids: string[], opts: Owner & { reason?: string; all?: boolean; scope?: string }, cmd: Command) => {
      const g = cmd.optsWithGlobals<Globals>();
      if (Boolean(opts.all) === ids.length > 0 || (Object.keys(filterOf(opts)).length > 0 && !opts.all)) {
        process.stderr.write(`cadre: name the approvals to ${verb}, or give --all (optionally with --task, --session or --tool), not both\n`);
        return void (process.exitCode = EXIT.usage);
      }
      const decision = { approved: verb === 'approve', ...(opts.reason ? { reason: opts.reason } : {}), ...(opts.scope ? { scope: opts.scope } : {}) };
      const results = opts.all ? await decideAll(client(), { workspace_id: g.workspace, ...filterOf(opts) }, decision) : await decideIds(client(), [...new Set(ids)], decision);
      process.exitCode = report(results, Boolean(g.json), opts.all ? `no pending approvals in ${g.workspace}${describeFilter(opts)}` : null);
    });
  }
}

/** The inbox filter for --task / --session / --tool. */
function filterOf(opts: Owner): Record<string, string> {
  return { ...(opts.task ? { task_id: opts.task } : {}), ...(opts.session ? { session_id: opts.session } : {}), ...(opts.tool ? { tool: opts.tool } : {}) };
}

function describeFilter(opts: Owner): string {
  return [opts.task && ` for task ${opts.task}`, opts.session && ` for session ${opts.session}`, opts.tool && ` of tool ${opts.tool}`].filter(Boolean).join('');
}

async function decideIds(c: CadreClient, ids: string[], decision: Json): Promise<Json[]> {
  const results: Json[] = [];
  for (let i = 0; i < ids.length; i += BULK_MAX) results.push(...(await c.approvals.decideMany({ ids: ids.slice(i, i + BULK_MAX), ...decision })));
  return results;
}

/** The server decides at most BULK_MAX of a filter's pending approvals per call: ask again while it was full. */
async function decideAll(c: CadreClient, filter: Record<string, string>, decision: Json): Promise<Json[]> {
  const results: Json[] = [];
  for (;;) {
    const batch: Json[] = await c.approvals.decideMany({ filter, ...decision });
    results.push(...batch);
    if (batch.length < BULK_MAX || !batch.some((r) => r.outcome === 'decided')) return results;
  }
}

/** One line per decided approval on stdout, one per failure on stderr; exit 1 if any failed. */
function report(results: Json[], json: boolean, noneMessage: string | null): number {
  const decided = results.filter((r) => r.outcome === 'decided').map((r) => r.approval);
  const failed = results.filter((r) => r.outcome !== 'decided').map((r) => ({ approval_id: r.approval_id, outcome: r.outcome, message: r.error ?? r.outcome }));
  if (json) printJson({ decided, failed });
  else {
    for (const a of decided) process.stdout.write(`${a.approval_id} ${statusColour(a.status)} ${a.tool_name} for ${a.worker_id || `session ${a.session_id}`}\n`);
    for (const f of failed) process.stderr.write(`cadre: ${f.approval_id}: ${f.message} (${f.outcome})\n`);
    if (results.length === 0 && noneMessage) process.stdout.write(`${noneMessage}\n`);
  }
  return failed.length ? EXIT.error : EXIT.ok;
}

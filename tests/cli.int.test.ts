import { execFile, spawn } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_API_KEY, assertContiguous, httpClient, pollUntilTerminal, runsCall, waitForEvent, waitUntil } from '@cadre/testing';
import { TestStack } from './support/stack.ts';
import { createTaskNeedingApprovals } from './support/approvals.ts';

// The `cadre` bin as a user runs it: a child process against a real gateway and worker, its output and exit
// codes; one run inside tmux for the live tree on a terminal.

const REPO = fileURLToPath(new URL('../', import.meta.url));
const BIN = join(REPO, 'apps/cli/src/main.ts');
const RUNS_KEY = 'cli-test-runs-key';
const CONTROL_KEY = 'cli-test-control-key';
let stack: TestStack;
let env: Record<string, string>;
let cwd: string;

beforeAll(async () => {
  stack = await TestStack.start({ workers: 1, env: { RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: CONTROL_KEY, RUNS_MAX_ACTIVE_PER_WORKSPACE: '10' } });
  cwd = mkdtempSync(join(tmpdir(), 'cadre-cli-'));
  env = { PATH: process.env.PATH ?? '', CADRE_URL: stack.url, CADRE_API_KEY: TEST_API_KEY, CADRE_RUNS_KEY: RUNS_KEY, CADRE_RUNS_CONTROL_KEY: CONTROL_KEY, NO_COLOR: '1' };
});
afterAll(async () => {
  await stack?.stop();
  if (cwd) rmSync(cwd, { recursive: true, force: true });
});

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the bin (stdout is a pipe, so no TTY) and waits for it to exit. */
function cadre(args: string[], extraEnv: Record<string, string> = {}, dir = cwd): Promise<Result> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { cwd: dir, env: { ...env, ...extraEnv } }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

const newWorkspace = (): string => `ws-${randomUUID().slice(0, 8)}`;

/**
 * Runs the bin with its stdout read by a reader that goes away after the first line, as `| head -1` does; `then`
 * runs once the reader has gone (e.g. to make a watch write again).
 */
function cadreIntoHead(args: string[], then: () => Promise<unknown> = async () => undefined): Promise<Result> {
  const child = spawn(process.execPath, [BIN, ...args], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const readerGone = new Promise<void>((resolve) => {
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
      if (!stdout.includes('\n')) return;
      child.stdout.destroy();
      resolve();
    });
  });
  const exited = new Promise<number>((resolve) => child.on('close', (code, signal) => resolve(code ?? (signal ? 128 : 1))));
  return readerGone.then(then).then(async () => ({ code: await exited, stdout: stdout.split('\n')[0]!, stderr }));
}

describe('cadre', () => {
  it('shows its commands in --help and exits 2 on a usage error', async () => {
    const [help, taskHelp, runHelp, approvalsHelp, wrong, badLimit, badStatus, noId] = await Promise.all([
      cadre(['--help']), cadre(['task', '--help']), cadre(['run', '--help']), cadre(['approvals', '--help']), cadre(['task', 'fly']),
      cadre(['task', 'list', '--limit', 'zero']), cadre(['approvals', 'list', '--status', 'maybe']), cadre(['approvals', 'approve']),
    ]);
    expect(help.code).toBe(0);
    for (const word of ['status', 'task', 'run', 'approvals', 'Exit codes']) expect(help.stdout).toContain(word);
    for (const sub of ['list', 'approve', 'deny']) expect(approvalsHelp.stdout).toContain(sub);
    expect(badStatus.code).toBe(2);
    expect(badStatus.stderr).toMatch(/argument 'maybe' is invalid/);
    expect(noId.code).toBe(2);
    expect(noId.stderr).toMatch(/name the approvals to approve, or give --all/);
    for (const sub of ['create', 'list', 'get', 'watch', 'cancel']) expect(taskHelp.stdout).toContain(sub);
    for (const sub of ['list', 'get', 'pause', 'resume', 'stop', 'stop-all']) expect(runHelp.stdout).toContain(sub);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toMatch(/unknown command/);
    expect(badLimit.code).toBe(2);
    expect(badLimit.stderr).toMatch(/--limit must be a positive integer/);
  });

  it('creates, lists, gets and watches a task to its end (exit 0), piped as plain lines and as JSON lines', async () => {
    const ws = newWorkspace();
    const created = await cadre(['-w', ws, 'task', 'create', '--goal', 'Weigh it', '--worker', 'pro', '--worker', 'con']);
    expect(created.code).toBe(0);
    const taskId = created.stdout.trim();
    expect(taskId).toMatch(/^[0-9a-f-]{36}$/);

    const lines = await cadre(['task', 'watch', taskId]);
    expect(lines.code, lines.stderr).toBe(0);
    expect(lines.stdout).toMatch(/^#1 \S+ task task_queued queued: Weigh it$/m);
    expect(lines.stdout).toMatch(/^#\d+ \S+ pro-1 worker_completed/m);
    expect(lines.stdout).toMatch(/task_completed/);
    expect(lines.stdout).not.toContain('\u001b['); // no escape codes in a pipe

    const json = await cadre(['--json', 'task', 'watch', taskId]);
    expect(json.code).toBe(0);
    const events = json.stdout.trim().split('\n').map((l) => JSON.parse(l) as { seq: number; event_type: string });
    assertContiguous(events.map((e) => e.seq));
    expect(events.at(-1)!.event_type).toBe('task_completed');
    const resumed = await cadre(['--json', 'task', 'watch', taskId, '--after-seq', String(events.length - 2)]);
    expect(resumed.stdout.trim().split('\n').map((l) => JSON.parse(l).seq)).toEqual([events.length - 1, events.length]);

    const list = await cadre(['-w', ws, '--json', 'task', 'list']);
    expect(JSON.parse(list.stdout).tasks.map((t: { task_id: string }) => t.task_id)).toEqual([taskId]);
    const table = await cadre(['-w', ws, 'task', 'list', '--status', 'completed']);
    expect(table.stdout).toMatch(new RegExp(`^${taskId}\\s+completed\\s+named\\s+3`, 'm'));
    // An empty listing says so under its header rather than leaving a bare header to puzzle over.
    expect((await cadre(['-w', ws, 'task', 'list', '--status', 'failed'])).stdout.trim().split('\n').at(-1)).toBe(`no failed tasks in ${ws}`);
    const got = await cadre(['task', 'get', taskId]);
    expect(got.stdout).toMatch(/^status\s+completed$/m);
    expect(got.stdout).toMatch(/^pro-1\s+pro\s+completed/m);
  });

  it('exits 3 when the task fails and 4 when it is cancelled', async () => {
    const failed = await cadre(['task', 'create', '--goal', 'Doomed [[scripted:fail=400]]', '--worker', 'w', '--watch']);
    expect(failed.code, failed.stdout + failed.stderr).toBe(3);
    expect(failed.stdout).toMatch(/task_failed/);

    const slow = await cadre(['task', 'create', '--goal', 'Slow [[scripted:delay=20000]]', '--worker', 'w']);
    const taskId = slow.stdout.trim();
    const watching = cadre(['task', 'watch', taskId]);
    const cancelled = await cadre(['task', 'cancel', taskId, '--reason', 'enough']);
    expect(cancelled.stdout.trim()).toBe(`${taskId} cancelled`);
    const watched = await watching;
    expect(watched.code).toBe(4);
    expect(watched.stdout).toMatch(/task_cancelled task cancelled: enough/);
    expect(watched.stdout.trim().split('\n').at(-1)).toBe('cancelled: enough');
  });

  it('lists, pauses, resumes and stops runs; stop-all lists first and stops only with --yes', async () => {
    const ws = newWorkspace();
    const mk = async (query: string): Promise<string> => {
      const res = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: ws, agent_id: 'a', query, requested_by: 't', files: [], metadata: {} });
      return (res.body.run ?? res.body).run_id as string;
    };
    expect((await cadre(['-w', ws, 'run', 'list'])).stdout.trim().split('\n').at(-1)).toBe(`no runs in ${ws}`);
    const [one, two] = [await mk('first'), await mk('second')];
    const list = await cadre(['-w', ws, 'run', 'list']);
    expect(list.stdout).toMatch(new RegExp(`^${one}\\s+awaiting_worker\\s+agent_only`, 'm'));
    expect((await cadre(['run', 'pause', one])).stdout.trim()).toBe(`${one} paused agent_only`);
    expect((await cadre(['run', 'resume', one])).stdout.trim()).toBe(`${one} awaiting_worker agent_only`);
    expect((await cadre(['run', 'control-mode', one, 'shared_control'])).stdout.trim()).toBe(`${one} awaiting_worker shared_control`);
    expect(JSON.parse((await cadre(['--json', 'run', 'get', one])).stdout).run).toMatchObject({ run_id: one, control_mode: 'shared_control' });
    expect((await cadre(['run', 'stop', two])).stdout.trim()).toBe(`${two} stopped agent_only`);
    const refused = await cadre(['run', 'pause', two]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/HTTP 409/);

    const taskId = (await httpClient(stack.url).post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: ws, goal: 'Long [[scripted:delay=20000]]', team: { workers: [{ role: 'w' }] } })).body.task.task_id;
    const dry = await cadre(['-w', ws, 'run', 'stop-all']);
    expect(dry.code).toBe(2);
    expect(dry.stdout).toContain(`would stop 1 run(s) and cancel 1 task(s)`);
    expect(dry.stdout).toContain(`run  ${one}`);
    expect(dry.stdout).toContain(`task ${taskId}`);
    const stillActive = (await runsCall(stack.url, RUNS_KEY, 'GET', `/api/runs/${one}`)).body;
    expect((stillActive.run ?? stillActive).status).toBe('awaiting_worker');

    const done = await cadre(['-w', ws, 'run', 'stop-all', '--yes']);
    expect(done.code).toBe(0);
    expect(done.stdout).toContain('stopped 1 run(s) and cancelled 1 task(s)');
    expect(done.stdout).toContain(`run  ${one}`);
    expect(done.stdout).toContain(`task ${taskId}`);
  });

  it('stop-all --all-workspaces without --yes lists what it would stop in every workspace, by workspace, and stops nothing', async () => {
    const [wsRun, wsTask] = [newWorkspace(), newWorkspace()];
    const created = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: wsRun, agent_id: 'a', query: 'everywhere', requested_by: 't', files: [], metadata: {} });
    const runId = (created.body.run ?? created.body).run_id as string;
    const taskId = (await httpClient(stack.url).post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: wsTask, goal: 'Long [[scripted:delay=20000]]', team: { workers: [{ role: 'w' }] } })).body.task.task_id;

    const dry = await cadre(['run', 'stop-all', '--all-workspaces']);
    expect(dry.code, dry.stderr).toBe(2);
    expect(dry.stdout).toMatch(/^stop-all in every workspace would stop \d+ run\(s\) and cancel \d+ task\(s\):$/m);
    expect(dry.stdout).toContain(` ${wsRun}:\n  run  ${runId} awaiting_worker everywhere\n`);
    expect(dry.stdout).toMatch(new RegExp(` ${wsTask}:\n  task ${taskId} (running|queued) Long`));
    expect(dry.stderr).toContain('re-run with --yes to stop them.');
    const json = JSON.parse((await cadre(['--json', 'run', 'stop-all', '--all-workspaces'])).stdout) as { would_stop: { workspace_id: string | null; run_ids: string[]; task_ids: string[] } };
    expect(json.would_stop.workspace_id).toBeNull();
    expect(json.would_stop.run_ids).toContain(runId);
    expect(json.would_stop.task_ids).toContain(taskId);
    const run = (await runsCall(stack.url, RUNS_KEY, 'GET', `/api/runs/${runId}`)).body;
    expect((run.run ?? run).status).toBe('awaiting_worker');
    expect((await httpClient(stack.url).post(`/api/tasks/${taskId}/cancel`, { reason: 'done looking' })).status).toBe(200);
    expect((await cadre(['run', 'stop', runId])).code).toBe(0);
  });

  it('lists pending approvals, approves one and denies one with a reason; a second decision exits 1 naming the conflict', async () => {
    const ws = newWorkspace();
    const taskId = await createTaskNeedingApprovals(stack.url, ws, ['yes', 'no']);
    for (const worker of ['yes-1', 'no-2']) await waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_approval_requested' && e.worker_id === worker, 20_000);

    const table = await cadre(['-w', ws, 'approvals', 'list']);
    expect(table.code, table.stderr).toBe(0);
    const rows = table.stdout.trim().split('\n');
    expect(rows[0]).toMatch(/^APPROVAL\s+STATUS\s+TASK\s+WORKER\s+TOOL\s+ARGUMENTS\s+EXPIRES IN\s+REASON$/);
    // The two workers run in parallel: either may ask first (the list is oldest first), so the rows are compared by worker.
    expect(rows.slice(1).map((r) => r.split(/\s+/).slice(1, 5)).sort((x, y) => x[2]!.localeCompare(y[2]!))).toEqual([
      ['pending', taskId, 'no-2', 'calculate'],
      ['pending', taskId, 'yes-1', 'calculate'],
    ]);
    const listed = JSON.parse((await cadre(['-w', ws, '--json', 'approvals', 'list', '--task', taskId])).stdout) as { approvals: { approval_id: string; worker_id: string }[] };
    const idOf = (worker: string): string => listed.approvals.find((a) => a.worker_id === worker)!.approval_id;

    const approved = await cadre(['approvals', 'approve', idOf('yes-1')]);
    expect(approved.code, approved.stderr).toBe(0);
    expect(approved.stdout.trim()).toBe(`${idOf('yes-1')} approved calculate for yes-1`);
    const denied = await cadre(['--json', 'approvals', 'deny', idOf('no-2'), '--reason', 'not today']);
    expect(denied.code).toBe(0);
    expect(JSON.parse(denied.stdout)).toMatchObject({ decided: [{ approval_id: idOf('no-2'), status: 'denied', decision_reason: 'not today' }], failed: [] });

    // Deciding again, or an id nobody knows: each is named on stderr, exit 1; the recorded decision stands.
    const again = await cadre(['approvals', 'deny', idOf('yes-1'), 'no-such-approval']);
    expect(again.code).toBe(1);
    expect(again.stdout).toBe('');
    expect(again.stderr).toMatch(new RegExp(`^cadre: ${idOf('yes-1')}: .*already approved.* \\(conflict\\)$`, 'm'));
    expect(again.stderr).toMatch(/^cadre: no-such-approval: .* \(not_found\)$/m);
    // A scope the approval cannot take is the server's 400: a usage error that decides nothing.
    const badScope = await cadre(['approvals', 'approve', idOf('yes-1'), '--scope', 'session']);
    expect(badScope.code).toBe(2);
    expect(badScope.stderr).toMatch(/scope "session" applies to a session's approvals/);
    const events = await pollUntilTerminal(stack.url, taskId);
    expect(events.at(-1)!.event_type).toBe('task_completed');
    const resolved = events.filter((e) => e.event_type === 'worker_approval_resolved').map((e) => [e.worker_id, (e.payload as { approved: boolean }).approved]);
    expect(resolved.sort()).toEqual([['no-2', false], ['yes-1', true]]);
    const empty = await cadre(['-w', ws, 'approvals', 'list']);
    expect(empty.stdout).toContain(`no pending approvals in ${ws}`);
  });

  it('decides every pending approval with --all, of one task with --task; ids and --all together are a usage error', async () => {
    const ws = newWorkspace();
    const [two, one] = [await createTaskNeedingApprovals(stack.url, ws, ['p', 'q']), await createTaskNeedingApprovals(stack.url, ws, ['r'])];
    for (const [taskId, worker] of [[two, 'p-1'], [two, 'q-2'], [one, 'r-1']] as const) {
      await waitForEvent(stack.url, taskId, (e) => e.event_type === 'worker_approval_requested' && e.worker_id === worker, 20_000);
    }
    const both = await cadre(['-w', ws, 'approvals', 'approve', 'some-id', '--all']);
    expect(both.code).toBe(2);
    expect((await cadre(['-w', ws, 'approvals', 'approve', 'some-id', '--task', one])).code).toBe(2);

    expect((await cadre(['-w', ws, 'approvals', 'approve', '--all', '--tool', 'shell'])).stdout).toBe(`no pending approvals in ${ws} of tool shell\n`);
    const denied = await cadre(['-w', ws, '--json', 'approvals', 'deny', '--all', '--task', one, '--reason', 'not for r']);
    expect(denied.code, denied.stderr).toBe(0);
    const deniedBody = JSON.parse(denied.stdout) as { decided: { task_id: string; worker_id: string; status: string }[]; failed: unknown[] };
    expect(deniedBody.decided.map((a) => [a.task_id, a.worker_id, a.status])).toEqual([[one, 'r-1', 'denied']]);
    const approved = await cadre(['-w', ws, 'approvals', 'approve', '--all']);
    expect(approved.code, approved.stderr).toBe(0);
    expect(approved.stdout.trim().split('\n').map((l) => l.split(' ').slice(1).join(' ')).sort()).toEqual(['approved calculate for p-1', 'approved calculate for q-2']);
    expect((await cadre(['-w', ws, 'approvals', 'approve', '--all'])).stdout).toBe(`no pending approvals in ${ws}\n`);
    for (const taskId of [two, one]) expect((await pollUntilTerminal(stack.url, taskId)).at(-1)!.event_type).toBe('task_completed');
  });

  it('lists a session\'s pending approval with --session and in the workspace\'s inbox, and approves it by the listed id', async () => {
    const ws = newWorkspace();
    const api = httpClient(stack.url);
    const created = await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: ws, approval_policy: { rules: [{ tool: 'calculate', action: 'ask' }] } });
    const sessionId = created.body.session.session_id;
    await api.post(`/api/sessions/${sessionId}/messages`, { content: 'What is 6*7? [[scripted:call=calculate({"expression":"6*7"})]]' });
    const sessionEvents = async () => (await api.get<{ events: { event_type: string; payload: Record<string, unknown> }[] }>(`/api/sessions/${sessionId}/events`)).body.events;
    await waitUntil('the approval request', async () => (await sessionEvents()).some((e) => e.event_type === 'approval_requested'));

    const table = await cadre(['-w', ws, 'approvals', 'list', '--session', sessionId]);
    expect(table.code, table.stderr).toBe(0);
    const row = new RegExp(`^s\\.${sessionId}\\.[0-9a-f]{12}\\s+pending\\s+session ${sessionId}\\s+—\\s+calculate\\s`);
    expect(table.stdout.trim().split('\n')[1]).toMatch(row);
    // The workspace's inbox lists it too (its one row; the time left may have ticked on), and its id there decides it.
    const inbox = (await cadre(['-w', ws, 'approvals', 'list'])).stdout.trim().split('\n').slice(1);
    expect(inbox).toEqual([expect.stringMatching(row)]);
    const approvalId = inbox[0]!.split(/\s+/)[0]!;
    const approved = await cadre(['-w', ws, 'approvals', 'approve', approvalId]);
    expect(approved.code, approved.stderr).toBe(0);
    expect(approved.stdout.trim()).toMatch(new RegExp(`^s\\.${sessionId}\\.[0-9a-f]{12} approved calculate for session ${sessionId}$`));
    await waitUntil('the turn to complete', async () => (await sessionEvents()).some((e) => e.event_type === 'turn_complete'));
    expect((await sessionEvents()).find((e) => e.event_type === 'approval_resolved')!.payload).toMatchObject({ status: 'approved' });
    expect((await cadre(['-w', ws, 'approvals', 'list'])).stdout).toContain(`no pending approvals in ${ws}`);
  });

  it('stops quietly with exit 0 when the reader of its output goes away (| head -1)', async () => {
    const ws = newWorkspace();
    // A run whose `run get` output is larger than a pipe holds, so the CLI still writes after the reader has gone.
    const created = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: ws, query: 'piped', metadata: { blob: 'x'.repeat(256 * 1024) } });
    const runId = (created.body.run ?? created.body).run_id as string;
    const got = await cadreIntoHead(['run', 'get', runId]);
    expect(got.stdout).toMatch(/^\S+\s+\S/);
    expect(got.stderr).toBe('');
    expect(got.code).toBe(0);
    expect((await runsCall(stack.url, RUNS_KEY, 'POST', `/api/runs/${runId}/control`, { action: 'stop' })).status).toBe(200);
  });

  it('a watch whose reader goes away stops at its next event (here the cancel\'s) and exits 0 without a word', async () => {
    const ws = newWorkspace();
    const taskId = (await cadre(['-w', ws, 'task', 'create', '--goal', 'Slow [[scripted:delay=20000]]', '--worker', 'w'])).stdout.trim();
    const watched = await cadreIntoHead(['task', 'watch', taskId], () => httpClient(stack.url).post(`/api/tasks/${taskId}/cancel`, { reason: 'reader gone' }));
    expect(watched.stdout).toMatch(/^#1 \S+ task task_queued/);
    expect(watched.stderr).toBe('');
    expect(watched.code).toBe(0);
  });

  it('finds the gateway and keys under .cadre/ (as npm start writes them) and never prints a key', async () => {
    const project = mkdtempSync(join(tmpdir(), 'cadre-proj-'));
    try {
      mkdirSync(join(project, '.cadre'));
      mkdirSync(join(project, 'sub'));
      writeFileSync(join(project, '.cadre', 'gateway-url'), `${stack.url}\n`);
      writeFileSync(join(project, '.cadre', 'dev-api-key'), `${TEST_API_KEY}\n`);
      const bare = { CADRE_URL: '', CADRE_API_KEY: '', CADRE_RUNS_KEY: '', CADRE_RUNS_CONTROL_KEY: '' };
      const status = await cadre(['status'], bare, join(project, 'sub'));
      expect(status.code, status.stderr).toBe(0);
      expect(status.stdout).toContain(`gateway    ${stack.url}  (from ${join(project, '.cadre', 'gateway-url')})`);
      expect(status.stdout).toMatch(/healthy\s+yes\s+ready yes/);
      expect(status.stdout).toContain('workspace  default: 0 running, 0 queued task(s)');
      expect(status.stdout).toMatch(/control\s+\S*not set\S*\s+\(stop-all\)/);
      expect(status.stdout + status.stderr).not.toContain(TEST_API_KEY);

      const noKey = await cadre(['task', 'list'], bare, tmpdir());
      expect(noKey.code).toBe(2);
      expect(noKey.stderr).toMatch(/no API key: set CADRE_API_KEY/);
      const closed = await closedPort();
      const noGateway = await cadre(['task', 'list'], { CADRE_URL: `http://127.0.0.1:${closed}` });
      expect(noGateway.code).toBe(1);
      expect(noGateway.stderr).toContain(`cannot reach a gateway at http://127.0.0.1:${closed} (ECONNREFUSED)`);
      // status says why the gateway is not healthy, not only that it is not.
      const down = await cadre(['status'], { CADRE_URL: `http://127.0.0.1:${closed}` });
      expect(down.code).toBe(1);
      expect(down.stdout).toMatch(/healthy\s+no\s+ready no\s+\(cannot reach it: ECONNREFUSED; set CADRE_URL/);
    } finally {
      rmSync(project, { recursive: true, force: true });
    }
  });

  it('draws the team as a tree redrawn in place on a terminal (tmux)', async () => {
    const taskId = (await cadre(['task', 'create', '--goal', 'Plan it [[scripted:spawn=pro,con]] [[scripted:delay=200]]'])).stdout.trim();
    const session = `cadre-cli-${process.pid}`;
    const envArgs = Object.entries({ ...env, NO_COLOR: '' }).map(([k, v]) => `${k}=${v}`);
    const command = ['env', ...envArgs.map(shellQuote), shellQuote(process.execPath), shellQuote(BIN), 'task', 'watch', taskId].join(' ');
    const tmux = promisify(execFile);
    await tmux('tmux', ['new-session', '-d', '-s', session, '-x', '140', '-y', '30', `${command}; echo EXIT=$?; sleep 30`]);
    try {
      const pane = await waitUntil('the watch in tmux to exit', async () => {
        const shown = (await tmux('tmux', ['capture-pane', '-p', '-t', session])).stdout;
        return shown.includes('EXIT=') && shown;
      }, { timeoutMs: 20_000, everyMs: 100 });
      expect(pane).toContain('EXIT=0');
      // One header, one line per agent: the tree was redrawn in place, not appended.
      expect(pane.match(new RegExp(`task ${taskId}`, 'g'))).toHaveLength(1);
      expect(pane).toMatch(/^lead lead\s+completed/m);
      expect(pane).toMatch(/^├─ pro pro-1\s+completed/m);
      expect(pane).toMatch(/^└─ con con-2\s+completed/m);
      expect(pane).toMatch(/^completed — \d+ tokens/m);
      expect(pane).not.toMatch(/task_queued/);
    } finally {
      await tmux('tmux', ['kill-session', '-t', session]).catch(() => undefined);
    }
  });
});

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** A port nothing listens on (one just released). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  await new Promise((r) => server.close(r));
  return port;
}

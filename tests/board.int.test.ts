import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { TEST_API_KEY, httpClient, pollUntilTerminal, runsCall, waitUntil } from '@cadre/testing';
import { TestStack } from './support/stack.ts';
import { launchBrowser, type TestBrowser } from './support/browser.ts';
import { createTaskNeedingApprovals } from './support/approvals.ts';

// The board in a real browser (Debian's headless Chromium, driven by playwright-core) against a real gateway,
// worker pool and scripted model: what an operator sees and clicks. Screenshots land in .artifacts/screenshots.

const RUNS_KEY = 'board-test-runs-key';
const CONTROL_KEY = 'board-test-control-key';
let stack: TestStack;
let browser: TestBrowser;
let page: Page;
let api: ReturnType<typeof httpClient>;

beforeAll(async () => {
  [stack, browser] = await Promise.all([
    TestStack.start({ workers: 1, env: { RUNS_API_KEY: RUNS_KEY, RUNS_CONTROL_API_KEY: CONTROL_KEY, WORKER_CONCURRENCY: '8' } }),
    launchBrowser(),
  ]);
  page = browser.page;
  page.setDefaultTimeout(10_000);
  page.on('pageerror', (err) => console.error('page error:', err.message));
  api = httpClient(stack.url);
}, 60_000);
afterEach(async (ctx) => {
  // What the page showed when a test failed, beside the other screenshots.
  if (ctx.task.result?.state === 'fail') console.error('board status line:', await page.locator('#status').textContent().catch(() => ''));
  if (ctx.task.result?.state === 'fail') await browser.shot(`failed-${ctx.task.name.slice(0, 40).replace(/\W+/g, '-')}`).catch(() => undefined);
});
afterAll(async () => {
  await browser?.close();
  await stack?.stop();
});

const newWorkspace = (): string => `ws-${randomUUID().slice(0, 8)}`;

/** Points the signed-in board at another workspace, as a user would: the header field. */
async function useWorkspace(ws: string): Promise<void> {
  await page.getByRole('textbox', { name: 'Workspace' }).fill(ws);
  await page.getByRole('textbox', { name: 'Workspace' }).press('Tab');
}

/** The seqs in the event log, in the order shown. */
const shownSeqs = (): Promise<number[]> => page.locator('ol.log li').evaluateAll((rows) => rows.map((r) => Number(r.getAttribute('data-seq'))));

async function waitForTaskStatus(status: string, timeout = 20_000): Promise<void> {
  await page.locator(`[data-testid="task-status"]:text-is("${status}")`).waitFor({ timeout });
}

async function createTask(ws: string, goal: string, workers?: string[]): Promise<string> {
  const res = await api.post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: ws, goal, ...(workers ? { team: { workers: workers.map((role) => ({ role })) } } : {}) });
  expect(res.status).toBe(201);
  return res.body.task.task_id;
}

describe('the board', () => {
  it('is served at / as static files with a strict content security policy; other paths stay the API 404', async () => {
    const res = await fetch(`${stack.url}/`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/text\/html/);
    expect(res.headers.get('content-security-policy')).toContain("connect-src 'self'");
    expect(await res.text()).toContain('<script type="module" src="/app.js">');
    expect((await fetch(`${stack.url}/app.js`)).headers.get('content-type')).toMatch(/javascript/);
    const missing = await fetch(`${stack.url}/nothing-here.js`);
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ error: { code: 'not_found' } });
  });

  it('signs in with the API key, kept in session storage and never in the URL', async () => {
    await page.goto(stack.url);
    await page.getByLabel('API key').fill('not-the-key');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('alert').filter({ hasText: 'not accepted' }).waitFor();

    await page.getByLabel('API key').fill(TEST_API_KEY);
    await page.getByLabel('Runs key (for the runs view)').fill(RUNS_KEY);
    await page.getByLabel('Runs control key (for stop-all)').fill(CONTROL_KEY);
    await page.getByRole('textbox', { name: 'Workspace' }).fill('board');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Tasks in board' }).waitFor();
    await browser.shot('01-tasks');
    expect(page.url()).not.toContain(TEST_API_KEY);
    expect(await page.evaluate('sessionStorage.getItem("cadre.keys")')).toContain(TEST_API_KEY);
    expect(await page.evaluate('localStorage.length + document.cookie.length')).toBe(0);
  });

  it('creates a planned task and shows its workers appear and finish', async () => {
    await page.getByLabel('Goal').fill('Compare two designs [[scripted:spawn=pro,con,judge]] [[scripted:delay=150]]');
    await page.getByRole('combobox', { name: /^Team/ }).selectOption('planned');
    await page.getByRole('button', { name: 'Create task' }).click();
    await page.waitForURL(/#\/tasks\/[0-9a-f-]{36}$/);
    const taskId = page.url().split('/').at(-1)!;

    // Spawned workers appear under the lead as they spawn, then all finish.
    for (const role of ['pro', 'con', 'judge']) await page.getByRole('treeitem', { name: new RegExp(`^${role} `) }).waitFor({ timeout: 20_000 });
    await waitForTaskStatus('completed');
    const agents = await page.getByRole('treeitem').evaluateAll((items) => items.map((i) => [i.getAttribute('data-agent-id'), i.getAttribute('data-status')]));
    expect(agents).toHaveLength(4);
    expect(agents.every(([, status]) => status === 'completed')).toBe(true);
    expect(agents[0]![0]).toBe('lead');
    await page.getByRole('heading', { name: 'Result (completed)' }).waitFor();
    await page.getByText(/Usage: \d+ tokens/).waitFor();

    const task = (await api.get<{ task: { last_seq: number } }>(`/api/tasks/${taskId}`)).body.task;
    expect(await shownSeqs()).toEqual(Array.from({ length: task.last_seq }, (_, i) => i + 1));
    await browser.shot('02-team-view');

    // The list shows it with its team size.
    await page.getByRole('link', { name: '← Tasks' }).click();
    const row = page.locator(`tr[data-task-id="${taskId}"]`);
    await row.waitFor();
    expect(await row.getAttribute('data-status')).toBe('completed');
    expect(await row.locator('td').nth(3).textContent()).toBe('4');
  });

  it('resumes after a reload from its last seq: no event shown twice, none missing', async () => {
    // Each model call takes a second, so the reload lands while the team is still working.
    const taskId = await createTask('board', 'Slow team [[scripted:delay=1000]]', ['a', 'b']);
    const resumedFrom: string[] = [];
    page.on('request', (req) => {
      if (req.url().endsWith(`/api/tasks/${taskId}/stream`)) resumedFrom.push(req.headers()['last-event-id'] ?? 'none');
    });
    await page.goto(`${stack.url}/#/tasks/${taskId}`);
    await page.locator('ol.log li').nth(3).waitFor({ timeout: 20_000 });
    const beforeReload = await shownSeqs();
    const requestsBeforeReload = resumedFrom.length;
    await page.reload();
    await waitForTaskStatus('completed');
    const seqs = await shownSeqs();
    const task = (await api.get<{ task: { last_seq: number } }>(`/api/tasks/${taskId}`)).body.task;
    expect(seqs).toEqual(Array.from({ length: task.last_seq }, (_, i) => i + 1));
    // The first stream request started at 0; the one after the reload resumed where the page had got to (at
    // least), not from 0, while the team was still working: the rest came live.
    expect(resumedFrom[0]).toBe('0');
    const resumedAt = Number(resumedFrom[requestsBeforeReload]);
    expect(resumedAt).toBeGreaterThanOrEqual(beforeReload.at(-1)!);
    expect(resumedAt).toBeLessThan(task.last_seq);
  });

  it('cancels a running task', async () => {
    const taskId = await createTask('board', 'Never ends [[scripted:delay=20000]]', ['slow']);
    await page.goto(`${stack.url}/#/tasks/${taskId}`);
    await page.locator('[data-agent-id="slow-1"][data-status="running"]').waitFor({ timeout: 15_000 });
    await page.getByRole('button', { name: 'Cancel task' }).click();
    await waitForTaskStatus('cancelled');
    await page.locator('[data-agent-id="slow-1"][data-status="failed"]').waitFor();
    await page.locator('ol.log li[data-type="task_cancelled"]').waitFor();
    expect(await page.getByRole('button', { name: 'Cancel task' }).isDisabled()).toBe(true);
    expect((await api.get<{ task: { status: string } }>(`/api/tasks/${taskId}`)).body.task.status).toBe('cancelled');
    // Its Result card: a title and the reason; a task that ended without usage leaves no stray "null" text below.
    const outcome = page.getByRole('region', { name: 'Result (cancelled)' });
    await outcome.waitFor();
    expect(await outcome.evaluate((card) => [...card.childNodes].map((n) => n.nodeName))).toEqual(['H2', 'P']);
    expect(await outcome.textContent()).not.toContain('null');
    await browser.shot('03-cancelled');
  });

  it('pauses and resumes a run, and sets its control mode', async () => {
    const ws = newWorkspace();
    const created = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: ws, agent_id: 'agent-1', query: 'Tidy the desktop', requested_by: 'test', files: [], metadata: {} });
    const runId = (created.body.run ?? created.body).run_id as string;
    await useWorkspace(ws);
    await page.getByRole('link', { name: 'Runs' }).click();
    const row = page.locator(`tr[data-run-id="${runId}"]`);
    await row.locator('text=awaiting_worker').waitFor();
    const label = `run ${runId.slice(0, 8)}`;

    await page.getByRole('button', { name: `Pause ${label}` }).click();
    await page.locator(`tr[data-run-id="${runId}"][data-status="paused"]`).waitFor();
    await browser.shot('04-runs-paused');
    await page.getByRole('button', { name: `Resume ${label}` }).click();
    await page.locator(`tr[data-run-id="${runId}"][data-status="awaiting_worker"]`).waitFor();
    await page.getByLabel(`Control mode of ${label}`).selectOption('shared_control');
    await page.waitForFunction(async ([url, key, id]) => {
      const res = await fetch(`${url}/api/runs/${id}`, { headers: { 'x-windie-runs-key': key } });
      const body = (await res.json()) as { run?: { control_mode: string }; control_mode?: string };
      return (body.run ?? body).control_mode === 'shared_control';
    }, [stack.url, RUNS_KEY, runId] as const);
    const events = await runsCall(stack.url, RUNS_KEY, 'GET', `/api/runs/${runId}/events`);
    const actions = events.body.events.filter((e: { event_type: string }) => e.event_type === 'run-control').map((e: { payload: { action: string } }) => e.payload.action);
    expect(actions).toEqual(['pause', 'resume', 'set-control-mode']);
  });

  it('stop-all names what it will stop, stops it, then shows what it stopped', async () => {
    const ws = newWorkspace();
    const created = await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: ws, agent_id: 'agent-1', query: 'Long job', requested_by: 'test', files: [], metadata: {} });
    const runId = (created.body.run ?? created.body).run_id as string;
    const taskId = await createTask(ws, 'Long team [[scripted:delay=20000]]', ['w']);
    await useWorkspace(ws);
    await page.goto(`${stack.url}/#/runs`);
    await page.getByRole('button', { name: `Stop all in ${ws}…` }).click();
    const dialog = page.getByRole('alertdialog');
    await dialog.waitFor();
    const listed = await dialog.getByRole('list', { name: 'Will stop' }).textContent();
    expect(listed).toContain(`run ${runId.slice(0, 8)}`);
    expect(listed).toContain(`task ${taskId.slice(0, 8)}`);
    expect(await dialog.textContent()).toContain('This stops 1 run(s) and cancels 1 team task(s)');
    await browser.shot('05-stop-all-confirm');
    await page.getByRole('button', { name: 'Confirm stop all' }).click();
    const stopped = page.getByRole('list', { name: 'Stopped' });
    await stopped.waitFor();
    expect(await stopped.textContent()).toContain(`run ${runId}`);
    expect(await stopped.textContent()).toContain(`task ${taskId}`);
    await page.getByText('Stopped 1 run(s) and cancelled 1 task(s).').waitFor();
    await page.locator(`tr[data-run-id="${runId}"][data-status="stopped"]`).waitFor();
    await browser.shot('06-stop-all-done');
    const run = (await runsCall(stack.url, RUNS_KEY, 'GET', `/api/runs/${runId}`)).body;
    expect((run.run ?? run).status).toBe('stopped');
    expect((await api.get<{ task: { status: string } }>(`/api/tasks/${taskId}`)).body.task.status).toBe('cancelled');
  });

  it('starts a session, sends a message, shows the streamed answer and closes the session', async () => {
    await useWorkspace('board');
    await page.getByRole('link', { name: 'Sessions' }).click();
    await page.getByRole('button', { name: 'Start a session in board' }).waitFor();
    await browser.shot('08-sessions');
    await page.getByRole('button', { name: 'Start a session in board' }).click();
    await page.waitForURL(/#\/sessions\/[0-9a-f-]{36}$/);
    const sessionId = page.url().split('/').at(-1)!;
    // A word with no break in it (a link, a path) as a message may carry.
    const unbroken = `https://example.com/${'a'.repeat(60)}`;
    await page.getByRole('textbox', { name: 'Message' }).fill(`Say hello to the operator ${unbroken}`);
    await page.getByRole('button', { name: 'Send' }).click();
    await page.locator('ol.log li[data-type="turn_complete"]').waitFor({ timeout: 15_000 });
    const answer = await page.locator('.conversation li.agent').textContent();
    expect(answer).toMatch(/^agent Scripted answer to "Say hello to the operator/);
    // The event log says what happened in words, inside the log's width: no payload JSON, no word running past its edge.
    const logLine = (type: string) => page.locator(`ol.log li[data-type="${type}"]`).first().textContent();
    expect(await logLine('user_message')).toMatch(/user\s*says: Say hello to the operator https:\/\/example\.com\/a+…$/);
    expect(await logLine('turn_complete')).toMatch(/agent\s*turn ended: end_turn \(\d+ tokens\)$/);
    expect(await page.locator('ol.log').evaluate((log) => log.scrollWidth - log.clientWidth)).toBe(0);
    await browser.shot('08-session-conversation');
    await page.getByRole('button', { name: 'Close session' }).click();
    await page.locator('[data-testid="session-status"]:text-is("closed")').waitFor();
    expect((await api.get<{ session: { status: string } }>(`/api/sessions/${sessionId}`)).body.session.status).toBe('closed');
  });

  it('shows a session\'s answer once when a draining worker hands its turn back mid-stream', async () => {
    await useWorkspace('board');
    await page.getByRole('link', { name: 'Sessions', exact: true }).click();
    await page.getByRole('button', { name: 'Start a session in board' }).click();
    await page.waitForURL(/#\/sessions\/[0-9a-f-]{36}$/);
    const sessionId = page.url().split('/').at(-1)!;
    await page.getByRole('textbox', { name: 'Message' }).fill('Tell a long story [[scripted:words=300]] [[scripted:chunk_delay=40]]');
    await page.getByRole('button', { name: 'Send' }).click();
    await page.locator('.conversation li.agent').waitFor();
    // The worker pool drains with a short deadline (what SIGTERM does); a new pool resumes the turn.
    const [draining] = stack.pools.splice(0, 1);
    await draining!.close(300);
    await stack.addWorkerPool();
    await page.locator('ol.log li[data-type="turn_complete"]').waitFor({ timeout: 60_000 });
    expect(await page.locator('ol.log li[data-type="attempt_lost"]').count()).toBe(1);
    const { messages } = (await api.get<{ messages: { content: string }[] }>(`/api/sessions/${sessionId}/messages`)).body;
    expect(await page.locator('.conversation li.agent').textContent()).toBe(`agent ${messages.at(-1)!.content}`);
  }, 90_000);

  it('shows a new approval live (the inbox stream, no polling) and approves it; the parked worker resumes and the task completes', async () => {
    const ws = newWorkspace();
    const inboxRequests: string[] = [];
    page.on('request', (req) => {
      if (req.url().includes(`/api/approvals?workspace_id=${ws}`)) inboxRequests.push(req.url());
    });
    await useWorkspace(ws);
    await page.getByRole('link', { name: 'Approvals' }).click();
    await page.locator('[data-testid="inbox-state"]:text-is("live")').waitFor();
    await page.getByText('No pending approvals.').waitFor();
    const listedBefore = inboxRequests.length;
    const taskId = await createTaskNeedingApprovals(stack.url, ws);
    const approve = page.getByRole('button', { name: 'Approve calculate for calc-1' });
    await approve.waitFor({ timeout: 20_000 });
    await browser.shot('07-approvals');
    // The list was read again because the stream said so: one read per inbox event at most, not a 2 s timer.
    expect(inboxRequests.length - listedBefore).toBeGreaterThanOrEqual(1);
    expect(inboxRequests.length - listedBefore).toBeLessThanOrEqual(2);
    await approve.click();
    await page.getByText('Approved calculate for calc-1.').waitFor();
    const approvals = await api.get<{ approvals: { status: string; decided_by: string }[] }>(`/api/approvals?workspace_id=${ws}&task_id=${taskId}&status=approved`);
    expect(approvals.body.approvals).toHaveLength(1);
    const events = await pollUntilTerminal(stack.url, taskId);
    expect(events.at(-1)!.event_type).toBe('task_completed');
    expect(events.filter((e) => e.event_type === 'worker_approval_resolved').map((e) => (e.payload as { approved: boolean }).approved)).toEqual([true]);
  });

  it('decides in bulk: select all, untick one, approve the rest; then deny the last with a reason', async () => {
    const ws = newWorkspace();
    const taskId = await createTaskNeedingApprovals(stack.url, ws, ['a', 'b', 'c']);
    await useWorkspace(ws);
    await page.getByRole('link', { name: 'Approvals' }).click();
    for (const w of ['a-1', 'b-2', 'c-3']) await page.getByRole('checkbox', { name: `Select calculate for ${w}` }).waitFor({ timeout: 20_000 });
    expect(await page.getByRole('button', { name: 'Approve 0 selected approval(s)' }).isDisabled()).toBe(true);

    await page.getByRole('checkbox', { name: 'Select all pending approvals' }).check();
    await page.getByRole('checkbox', { name: 'Select calculate for c-3' }).uncheck();
    expect(await page.getByRole('checkbox', { name: 'Select all pending approvals' }).evaluate((el) => (el as unknown as { indeterminate: boolean }).indeterminate)).toBe(true);
    await browser.shot('09-approvals-bulk');
    await page.getByRole('button', { name: 'Approve 2 selected approval(s)' }).click();
    await page.getByText('Approved 2 approval(s).').waitFor();
    await page.locator('[data-testid="approval"]').nth(1).waitFor({ state: 'detached' });
    expect(await page.locator('[data-testid="approval"]').count()).toBe(1);

    await page.getByRole('checkbox', { name: 'Select calculate for c-3' }).check();
    await page.getByRole('textbox', { name: 'Reason for the decisions' }).fill('not this one');
    await page.getByRole('button', { name: 'Deny 1 selected approval(s)' }).click();
    await page.getByText('No pending approvals.').waitFor();
    const events = await pollUntilTerminal(stack.url, taskId);
    expect(events.at(-1)!.event_type).toBe('task_completed');
    const resolved = events.filter((e) => e.event_type === 'worker_approval_resolved').map((e) => {
      const p = e.payload as { status: string; reason: string };
      return [e.worker_id, p.status, p.reason];
    });
    expect(resolved.sort()).toEqual([['a-1', 'approved', ''], ['b-2', 'approved', ''], ['c-3', 'denied', 'not this one']]);
  });

  it('shows a session\'s tool call waiting for approval; approving it lets the turn finish', async () => {
    const ws = newWorkspace();
    expect((await api.request('PUT', `/api/workspaces/${ws}/approval-policy`, { rules: [{ tool: 'calculate', action: 'ask', reason: 'check the maths' }] })).status).toBe(200);
    await useWorkspace(ws);
    await page.getByRole('link', { name: 'Sessions' }).click();
    await page.getByRole('button', { name: `Start a session in ${ws}` }).click();
    await page.waitForURL(/#\/sessions\/[0-9a-f-]{36}$/);
    await page.getByRole('textbox', { name: 'Message' }).fill('What is 6*7? [[scripted:call=calculate({"expression":"6*7"})]]');
    await page.getByRole('button', { name: 'Send' }).click();
    const approve = page.getByRole('button', { name: 'Approve calculate({"expression":"6*7"})' });
    await approve.waitFor({ timeout: 15_000 });
    await page.locator('[data-testid="session-status"]:text-is("waiting on an approval")').waitFor();
    await browser.shot('10-session-approval');
    await approve.click();
    await page.locator('ol.log li[data-type="turn_complete"]').waitFor({ timeout: 15_000 });
    expect(await page.locator('.conversation li.agent').textContent()).toContain('using 1 tool result(s): 42');
    await page.getByRole('region', { name: 'Waiting for your approval' }).waitFor({ state: 'hidden' });
  });

  it('lists a session\'s pending approval in the Approvals tab, linked to its session, and approves it there; the turn finishes', async () => {
    const ws = newWorkspace();
    const created = await api.post<{ session: { session_id: string } }>('/api/sessions', { workspace_id: ws, approval_policy: { rules: [{ tool: 'calculate', action: 'ask' }] } });
    const sessionId = created.body.session.session_id;
    await useWorkspace(ws);
    await page.getByRole('link', { name: 'Approvals' }).click();
    await page.getByText('No pending approvals.').waitFor();
    await api.post(`/api/sessions/${sessionId}/messages`, { content: 'What is 6*7? [[scripted:call=calculate({"expression":"6*7"})]]' });
    const approve = page.getByRole('button', { name: `Approve calculate for session ${sessionId.slice(0, 8)}` });
    await approve.waitFor({ timeout: 20_000 });
    expect(await page.getByRole('link', { name: `Session ${sessionId.slice(0, 8)}` }).getAttribute('href')).toBe(`#/sessions/${sessionId}`);
    await approve.click();
    await page.getByText(`Approved calculate for session ${sessionId.slice(0, 8)}.`).waitFor();
    await page.getByText('No pending approvals.').waitFor();
    await waitUntil('the turn to finish', async () => (await api.get<{ events: { event_type: string }[] }>(`/api/sessions/${sessionId}/events`)).body.events.some((e) => e.event_type === 'turn_complete'));
  });

  it('says a task or session it cannot load is not there, instead of "connecting…" for ever, and offers nothing to press', async () => {
    await useWorkspace('board');
    const unknown = '00000000-0000-4000-8000-000000000000';
    await page.goto(`${stack.url}/#/tasks/${unknown}`);
    await page.locator(`[data-testid="stream-state"]:text-is("could not load the task: task ${unknown} not found")`).waitFor();
    expect(await page.getByRole('button', { name: 'Cancel task' }).isDisabled()).toBe(true);
    await page.goto(`${stack.url}/#/sessions/${unknown}`);
    await page.locator(`[data-testid="stream-state"]:text-is("could not load the session: session ${unknown} not found")`).waitFor();
    for (const name of ['Cancel turn', 'Close session', 'Send']) expect(await page.getByRole('button', { name }).isDisabled()).toBe(true);
  });

  it('names every control on every view (the accessible names Chromium computes)', async () => {
    const ws = newWorkspace();
    const taskId = await createTaskNeedingApprovals(stack.url, ws);
    await runsCall(stack.url, RUNS_KEY, 'POST', '/api/runs/', { workspace_id: ws, agent_id: 'agent-1', query: 'Named controls', requested_by: 'test', files: [], metadata: {} });
    await useWorkspace(ws);
    const cdp = await browser.context.newCDPSession(page);
    const unnamed = async (): Promise<string[]> => {
      const { nodes } = (await cdp.send('Accessibility.getFullAXTree')) as { nodes: { ignored: boolean; role?: { value: string }; name?: { value: string } }[] };
      const controls = new Set(['button', 'link', 'textbox', 'combobox', 'checkbox', 'spinbutton', 'searchbox', 'radio', 'switch', 'slider']);
      return nodes.filter((n) => !n.ignored && controls.has(n.role?.value ?? '') && !n.name?.value?.trim()).map((n) => n.role!.value);
    };
    const views: [string, () => Promise<unknown>][] = [
      ['#/tasks', () => page.getByRole('button', { name: 'Create task' }).waitFor()],
      [`#/tasks/${taskId}`, () => page.getByRole('treeitem').first().waitFor()],
      ['#/runs', () => page.locator('tr[data-run-id]').first().waitFor()],
      ['#/sessions', () => page.getByRole('button', { name: `Start a session in ${ws}` }).waitFor()],
      ['#/approvals', () => page.getByRole('checkbox', { name: 'Select calculate for calc-1' }).waitFor({ timeout: 20_000 })],
    ];
    for (const [hash, ready] of views) {
      await page.goto(`${stack.url}/${hash}`);
      await ready();
      expect(await unnamed(), hash).toEqual([]);
    }
    await cdp.detach();
  });
});

import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'puppeteer-core';
import { TEST_API_KEY, httpClient, pollUntilTerminal } from '@cadre/testing';
import { TestStack } from './support/stack.ts';
import { launchFirefox, type TestFirefox } from './support/firefox.ts';
import { createTaskNeedingApprovals } from './support/approvals.ts';

// The board in a real Firefox (Debian's firefox-esr, driven over WebDriver BiDi by puppeteer-core) against a real
// gateway, worker pool and scripted model: the operator's main path, as in Chromium (board.int.test.ts).
// Screenshots land in .artifacts/screenshots/firefox-*.png.

let stack: TestStack;
let firefox: TestFirefox;
let page: Page;
let api: ReturnType<typeof httpClient>;

beforeAll(async () => {
  [stack, firefox] = await Promise.all([TestStack.start({ workers: 1, env: { WORKER_CONCURRENCY: '8' } }), launchFirefox()]);
  page = firefox.page;
  page.setDefaultTimeout(15_000);
  page.on('pageerror', (err) => console.error('page error:', (err as Error).message));
  api = httpClient(stack.url);
}, 60_000);
afterEach(async (ctx) => {
  if (ctx.task.result?.state !== 'fail') return;
  console.error('board status line:', await page.$eval('#status', (el) => el.textContent).catch(() => ''));
  await firefox.shot(`failed-${ctx.task.name.slice(0, 40).replace(/\W+/g, '-')}`).catch(() => undefined);
});
afterAll(async () => {
  await firefox?.close();
  await stack?.stop();
});

/** A control by its role and accessible name, as assistive technology finds it. */
const control = (page: Page, role: string, name: string) => page.locator(`::-p-aria([name="${name}"][role="${role}"])`);

/** A password field by its accessible name: it has no role, and its label carries the same name. */
async function fillPassword(name: string, value: string): Promise<void> {
  const named = await page.$$(`::-p-aria(${name})`);
  const inputs = await Promise.all(named.map((h) => h.evaluate((el) => el.tagName === 'INPUT' && el.getAttribute('type') === 'password')));
  const field = named[inputs.indexOf(true)];
  if (!field) throw new Error(`no password field named ${name}`);
  await field.evaluate((el) => ((el as unknown as { value: string }).value = ''));
  await field.type(value);
}

async function waitForText(selector: string, text: string, timeout = 20_000): Promise<void> {
  // A string runs in the page (this project's TypeScript has no DOM types).
  await page.waitForFunction(`document.querySelector(${JSON.stringify(selector)})?.textContent === ${JSON.stringify(text)}`, { timeout });
}

/** Each agent of the tree: [id, status], lead first. */
const agents = (): Promise<string[][]> =>
  page.$$eval('[role="treeitem"]', (items) => items.map((i) => [i.getAttribute('data-agent-id') ?? '', i.getAttribute('data-status') ?? '']));

/**
 * Points the signed-in board at another workspace: type it into the header field and press Enter. (Leaving the
 * field applies it too, but a headless Firefox window never has the focus, so it fires no blur and no change.)
 */
async function useWorkspace(ws: string): Promise<void> {
  const field = await control(page, 'textbox', 'Workspace').waitHandle();
  await field.evaluate((el) => ((el as unknown as { value: string }).value = ''));
  await field.type(ws);
  await field.press('Enter');
}

describe('the board in Firefox', () => {
  it('signs in with the API key, kept in session storage and never in the URL', async () => {
    await page.goto(stack.url);
    await page.waitForSelector('::-p-text(Sign in)');
    await fillPassword('API key', 'not-the-key');
    await control(page, 'button', 'Sign in').click();
    await waitForText('[role="alert"]', 'That API key was not accepted.');

    await fillPassword('API key', TEST_API_KEY);
    await control(page, 'textbox', 'Workspace').fill('firefox');
    await control(page, 'button', 'Sign in').click();
    await waitForText('#tasks-title', 'Tasks in firefox');
    await firefox.shot('01-tasks');
    expect(page.url()).not.toContain(TEST_API_KEY);
    expect(await page.evaluate(() => sessionStorage.getItem('cadre.keys'))).toContain(TEST_API_KEY);
    expect(await page.evaluate('localStorage.length + document.cookie.length')).toBe(0);
  });

  it('creates a planned task from the form and shows its spawned workers appear and finish', async () => {
    await control(page, 'textbox', 'Goal').fill('Weigh it [[scripted:spawn=pro,con]] [[scripted:delay=150]]');
    await control(page, 'button', 'Create task').click();
    await page.waitForFunction('/^#\\/tasks\\/[0-9a-f-]{36}$/.test(location.hash)');
    const taskId = page.url().split('/').at(-1)!;
    await waitForText('[data-testid="task-status"]', 'completed');
    expect(await agents()).toEqual([['lead', 'completed'], ['pro-1', 'completed'], ['con-2', 'completed']]);
    await page.waitForSelector('::-p-text(Result (completed))');
    const task = (await api.get<{ task: { last_seq: number; status: string } }>(`/api/tasks/${taskId}`)).body.task;
    expect(task.status).toBe('completed');
    const seqs = await page.$$eval('ol.log li', (rows) => rows.map((r) => Number(r.getAttribute('data-seq'))));
    expect(seqs).toEqual(Array.from({ length: task.last_seq }, (_, i) => i + 1));
    await firefox.shot('02-team-view');
  });

  it('cancels a running task', async () => {
    const res = await api.post<{ task: { task_id: string } }>('/api/tasks', { workspace_id: 'firefox', goal: 'Never ends [[scripted:delay=20000]]', team: { workers: [{ role: 'slow' }] } });
    const taskId = res.body.task.task_id;
    await page.goto(`${stack.url}/#/tasks/${taskId}`);
    await page.waitForSelector('[data-agent-id="slow-1"][data-status="running"]');
    await control(page, 'button', 'Cancel task').click();
    await waitForText('[data-testid="task-status"]', 'cancelled');
    await page.waitForSelector('ol.log li[data-type="task_cancelled"]');
    expect(await page.$eval('::-p-aria([name="Cancel task"][role="button"])', (b) => (b as unknown as { disabled: boolean }).disabled)).toBe(true);
    expect((await api.get<{ task: { status: string } }>(`/api/tasks/${taskId}`)).body.task.status).toBe('cancelled');
    await firefox.shot('03-cancelled');
  });

  it('approves one pending approval, then the rest in bulk; the parked workers resume and the task completes', async () => {
    const ws = `ws-${randomUUID().slice(0, 8)}`;
    const taskId = await createTaskNeedingApprovals(stack.url, ws, ['calc', 'x', 'y']);
    await useWorkspace(ws);
    await control(page, 'link', 'Approvals').click();
    await waitForText('main h1', `Approvals in ${ws}`);
    for (const w of ['calc-1', 'x-2', 'y-3']) await control(page, 'checkbox', `Select calculate for ${w}`).setTimeout(20_000).wait();
    await firefox.shot('04-approvals');
    await control(page, 'button', 'Approve calculate for calc-1').click();
    await page.waitForSelector('::-p-text(Approved calculate for calc-1.)');
    await page.waitForFunction(`document.querySelectorAll('[data-testid="approval"]').length === 2`);

    await control(page, 'checkbox', 'Select all pending approvals').click();
    await control(page, 'button', 'Approve 2 selected approval(s)').click();
    await page.waitForSelector('::-p-text(No pending approvals.)');
    const events = await pollUntilTerminal(stack.url, taskId);
    expect(events.at(-1)!.event_type).toBe('task_completed');
    const resolved = events.filter((e) => e.event_type === 'worker_approval_resolved').map((e) => [e.worker_id, (e.payload as { status: string }).status]);
    expect(resolved.sort()).toEqual([['calc-1', 'approved'], ['x-2', 'approved'], ['y-3', 'approved']]);
  });
});

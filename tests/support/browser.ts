import { mkdtemp, mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

/** Debian's chromium (`.ci/run` installs it); the tests never download a browser. */
export const CHROMIUM = process.env.CADRE_CHROMIUM ?? '/usr/bin/chromium';
export const SCREENSHOTS = fileURLToPath(new URL('../../.artifacts/screenshots/', import.meta.url));

// Without the background-networking flags, Chromium keeps dialling Google's hosts, which this machine refuses.
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

export interface TestBrowser {
  context: BrowserContext;
  page: Page;
  shot(name: string): Promise<void>;
  close(): Promise<void>;
}

/** Headless Chromium on a fresh profile directory, one page, screenshots into .artifacts/screenshots. */
export async function launchBrowser(): Promise<TestBrowser> {
  const profile = await mkdtemp(join(tmpdir(), 'cadre-chromium-'));
  await mkdir(SCREENSHOTS, { recursive: true });
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
    viewport: { width: 1360, height: 860 },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  return {
    context,
    page,
    shot: async (name) => void (await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true })),
    async close() {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}

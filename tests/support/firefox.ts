import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { SCREENSHOTS } from './browser.ts';

/** Debian's Firefox ESR (`.ci/run` installs it); puppeteer-core speaks WebDriver BiDi to it and downloads nothing. */
export const FIREFOX = process.env.CADRE_FIREFOX ?? '/usr/bin/firefox-esr';

export interface TestFirefox {
  browser: Browser;
  page: Page;
  /** A full-page screenshot into .artifacts/screenshots, named firefox-<name>.png. */
  shot(name: string): Promise<void>;
  close(): Promise<void>;
}

/** Headless Firefox on a fresh profile (puppeteer makes and removes it), one page. */
export async function launchFirefox(): Promise<TestFirefox> {
  await mkdir(SCREENSHOTS, { recursive: true });
  const browser = await puppeteer.launch({
    browser: 'firefox',
    executablePath: FIREFOX,
    headless: true,
    defaultViewport: { width: 1360, height: 860 },
    // Nothing on this machine may call home: no updates, telemetry or remote settings.
    extraPrefsFirefox: { 'app.update.enabled': false, 'datareporting.policy.dataSubmissionEnabled': false, 'toolkit.telemetry.enabled': false, 'network.captive-portal-service.enabled': false },
  });
  const page = (await browser.pages())[0] ?? (await browser.newPage());
  return {
    browser,
    page,
    shot: async (name) => void (await page.screenshot({ path: join(SCREENSHOTS, `firefox-${name}.png`) as `${string}.png`, fullPage: true })),
    close: () => browser.close(),
  };
}

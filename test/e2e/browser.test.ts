/**
 * The checkout page in a real browser (Debian's chromium, headless, driven by
 * playwright-core): a double click on Pay, and a Pay whose response the server
 * drops, each end with exactly one charge on the page and in the database.
 */
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isolatedSchema, type PgSchema } from '../helpers/postgres.js';
import { type Instance, startInstance } from './helpers.js';

const artifacts = fileURLToPath(new URL('../../test-artifacts/', import.meta.url));
let pgs: PgSchema;
let app: Instance;
let browser: Browser;
let page: Page;

beforeAll(async () => {
  mkdirSync(artifacts, { recursive: true });
  pgs = await isolatedSchema('e2e_browser', 2, false);
  // The PostgreSQL store: the charge and its stored answer commit together.
  app = await startInstance('browser', {
    IDEMPOTENCY_STORE: 'postgres',
    DATABASE_URL: pgs.url,
    CHARGE_DELAY_MS: '400',
    LOG_EVENTS: '1',
  });
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  page = await browser.newPage();
  await page.goto(app.url);
  await page.waitForSelector('#count:has-text("(0)")');
}, 120_000);
afterAll(async () => {
  await browser?.close();
  await app?.kill('SIGKILL');
  await pgs?.drop();
});

const ledger = async () => (await pgs.pool.query<{ n: number }>('select count(*)::int as n from charges')).rows[0]!.n;
const shownCharges = () => page.locator('#charges li').count();

describe('checkout page', () => {
  it('a double click on Pay charges once', async () => {
    await page.fill('#amount', '2500');
    await page.dblclick('#pay');
    // both submits settle: one ran, the other met 409, waited, and got the same charge
    await expect
      .poll(() => page.locator('#log').textContent(), { timeout: 20_000 })
      .toMatch(/charge #\d+[\s\S]*charge #\d+/);
    const log = (await page.locator('#log').textContent()) ?? '';
    const ids = [...log.matchAll(/charge #(\d+)/g)].map((m) => m[1]);
    expect(new Set(ids).size).toBe(1);
    await expect.poll(shownCharges).toBe(1);
    expect(await ledger()).toBe(1);
    await page.screenshot({ path: `${artifacts}checkout-double-click.png`, fullPage: true });
  });

  it('a Pay whose response is dropped is retried with the same key and answered by the replay', async () => {
    await page.check('#drop');
    await expect.poll(() => page.locator('#log').textContent()).toMatch(/will drop its next/);
    await page.fill('#amount', '4200');
    await page.click('#pay');
    await app.waitFor(/"response_dropped"/);
    await expect.poll(shownCharges, { timeout: 20_000 }).toBe(2);
    // the page's log, newest first: the charge, then (below) the failed attempt retried with the same key
    const log = (await page.locator('#log').textContent()) ?? '';
    const [latest] = log.split(/Pay: 4200 EUR/);
    expect(latest).toMatch(/charge #\d+ \(run on browser\)\n[\s\S]*attempt 1 failed[\s\S]*retrying with the same key/);
    await app.waitFor(/"result":"replayed"/); // the server answered the retry from the stored charge
    expect(await ledger()).toBe(2);
    const rows = await page.locator('#charges li').allTextContents();
    expect(rows.filter((r) => r.includes('42.00 EUR'))).toHaveLength(1);
    await page.screenshot({ path: `${artifacts}checkout-dropped-response.png`, fullPage: true });
  });
});

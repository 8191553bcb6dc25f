/**
 * The checkout page in a real browser (Debian's chromium, headless, driven by
 * playwright-core) against a real instance: each outcome a person should see
 * is on the page (a first run with its time, a replay with the original time,
 * a double click whose 409 was retried, a 422 for the same key with another
 * amount, the instance that answered), and the ledger holds one charge per key.
 */
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium } from '../helpers/browser.js';
import { isolatedSchema, type PgSchema } from '../helpers/postgres.js';
import { sleep } from '../helpers/redis.js';
import { type Instance, startInstance } from './helpers.js';

const artifacts = fileURLToPath(new URL('../../test-artifacts/', import.meta.url));
// The page shows times in the browser's zone: one that is not the machine's, at +05:30.
const TIME_ZONE = 'Asia/Kolkata';
const OFFSET_MS = 330 * 60_000;
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
  browser = await launchChromium();
  page = await browser.newPage({ timezoneId: TIME_ZONE });
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
/** When the ledger row of charge `id` was written, as HH:MM:SS in the page's time zone. */
const chargedAt = async (id: number) => {
  const { rows } = await pgs.pool.query<{ at: Date }>('select created_at as at from charges where id = $1', [id]);
  return { at: rows[0]!.at, shown: new Date(rows[0]!.at.getTime() + OFFSET_MS).toISOString().slice(11, 19) };
};

interface Line {
  outcome: string;
  key: string;
  instance: string;
  retries: number;
  headline: string;
  detail: string;
  /** What the link retried, if it did. */
  retried: string;
  chargeId?: number;
}
/** The lines of Results, oldest first. */
const lines = async (): Promise<Line[]> => {
  const shown = await page.locator('#results li').evaluateAll((items) =>
    items.map((li) => ({
      outcome: li.getAttribute('data-outcome') ?? '',
      key: li.getAttribute('data-key') ?? '',
      instance: li.getAttribute('data-instance') ?? '',
      retries: Number(li.getAttribute('data-retries')),
      headline: li.querySelector('.outcome')?.textContent ?? '',
      detail: li.querySelector('.detail')?.textContent ?? '',
      retried: li.querySelector('.retried')?.textContent ?? '',
    })),
  );
  return shown.reverse().map((line) => {
    const id = /charge #(\d+)/.exec(line.detail)?.[1];
    return id === undefined ? line : { ...line, chargeId: Number(id) };
  });
};
/** Waits until Results has `count` more lines than `before` and none is pending; returns the new ones, oldest first. */
const settled = async (before: number, count: number): Promise<Line[]> => {
  await expect
    .poll(async () => (await lines()).filter((l) => l.outcome !== 'pending').length, { timeout: 20_000 })
    .toBe(before + count);
  const all = await lines();
  expect(all).toHaveLength(before + count);
  return all.slice(before);
};

describe('checkout page', () => {
  it('a first Pay shows its time; the same key sent again is labelled Replayed, with the original time', async () => {
    await page.fill('#amount', '1500');
    await page.click('#pay');
    const [first] = await settled(0, 1);
    expect(first).toMatchObject({ outcome: 'charged', instance: 'browser', retries: 0 });
    const charged = await chargedAt(first!.chargeId!);
    expect(first!.headline).toBe(`Charged at ${charged.shown}`);
    expect(first!.detail).toContain('15.00 EUR');
    expect(first!.detail).toContain('answered by browser');

    // a second later, so that the time of the replay itself would differ from the original's
    await sleep(Math.max(0, charged.at.getTime() + 1_000 - Date.now()));
    await page.click('#resend'); // the amount in the form is unchanged
    const [again] = await settled(1, 1);
    expect(again).toMatchObject({ outcome: 'replayed', key: first!.key, instance: 'browser', retries: 0 });
    expect(again!.headline).toBe(`Replayed — originally charged at ${charged.shown}`);
    expect(again!.chargeId).toBe(first!.chargeId);
    expect(again!.detail).toContain('not charged again');
    expect(again!.detail).toContain('answered by browser');
    await app.waitFor(/"result":"replayed"/);
    expect(await ledger()).toBe(1);
    await expect.poll(shownCharges).toBe(1);
    await page.screenshot({ path: `${artifacts}checkout-replayed.png`, fullPage: true });
  });

  it('a double click: the second submit meets 409 in flight, is retried by the link, and gets the replay', async () => {
    const before = (await lines()).length;
    const charges = await ledger();
    await page.fill('#amount', '2500');
    await page.dblclick('#pay');
    const [first, second] = await settled(before, 2);
    // one ran; the other, sent while it ran, met 409, was retried with the same key and got the stored charge
    expect(second!.key).toBe(first!.key);
    const ran = [first!, second!].find((l) => l.outcome === 'charged');
    const retried = [first!, second!].find((l) => l.outcome === 'replayed');
    expect(ran).toMatchObject({ retries: 0, instance: 'browser' });
    expect(retried).toMatchObject({ instance: 'browser' });
    expect(retried!.retries).toBeGreaterThanOrEqual(1);
    expect(retried!.retried).toMatch(
      /^Retried \d+× by the client link with the same key, after: 409 conflict: this key's first call was still running/,
    );
    expect(ran!.retried).toBe('');
    expect(retried!.chargeId).toBe(ran!.chargeId);
    const charged = await chargedAt(ran!.chargeId!);
    expect(ran!.headline).toBe(`Charged at ${charged.shown}`);
    expect(retried!.headline).toBe(`Replayed — originally charged at ${charged.shown}`);
    // the page's log, newest first, shows the link's retry of that 409
    expect(await page.locator('#log').textContent()).toMatch(
      /attempt 1 failed \(A request with this idempotency key is still being processed[^\n]*retrying with the same key/,
    );
    expect(await ledger()).toBe(charges + 1);
    await expect.poll(shownCharges).toBe(charges + 1);
    await page.screenshot({ path: `${artifacts}checkout-double-click.png`, fullPage: true });
  });

  it('the same key with another amount is refused with 422, explained; a new Pay gets a new key', async () => {
    const before = (await lines()).length;
    const charges = await ledger();
    const lastKey = (await lines()).at(-1)!.key;
    await page.fill('#amount', '2600'); // the last Pay was 25.00 EUR
    await page.click('#resend');
    const [refused] = await settled(before, 1);
    expect(refused).toMatchObject({ outcome: 'mismatch', key: lastKey, instance: 'browser', retries: 0 });
    expect(refused!.headline).toBe(
      'Refused: 422 payload_mismatch — this key was already used for another amount; a new payment needs a new key',
    );
    expect(refused!.detail).toContain('Resend 26.00 EUR');
    expect(refused!.detail).toContain('(it paid 25.00 EUR)');
    expect(await ledger()).toBe(charges);
    await page.screenshot({ path: `${artifacts}checkout-payload-mismatch.png`, fullPage: true });

    await page.click('#pay');
    const [paid] = await settled(before + 1, 1);
    expect(paid).toMatchObject({ outcome: 'charged', instance: 'browser' });
    expect(paid!.key).not.toBe(lastKey);
    expect(paid!.detail).toContain('26.00 EUR');
    expect(await ledger()).toBe(charges + 1);
  });

  it('a Pay whose response is dropped is retried with the same key and answered by the replay', async () => {
    const before = (await lines()).length;
    const charges = await ledger();
    await page.check('#drop');
    await expect.poll(() => page.locator('#log').textContent()).toMatch(/will drop its next/);
    await page.fill('#amount', '4200');
    await page.click('#pay');
    await app.waitFor(/"response_dropped"/);
    const [line] = await settled(before, 1);
    // the first attempt got no answer; the link retried with the same key and the server replayed the charge
    expect(line).toMatchObject({ outcome: 'replayed', instance: 'browser', retries: 1 });
    expect(line!.retried).toMatch(/^Retried 1× by the client link with the same key, after: no answer \(/);
    const charged = await chargedAt(line!.chargeId!);
    expect(line!.headline).toBe(`Replayed — originally charged at ${charged.shown}`);
    // the page's log, newest first: the charge, then (below) the failed attempt retried with the same key
    const log = (await page.locator('#log').textContent()) ?? '';
    const [latest] = log.split(/Pay: 4200 EUR/);
    expect(latest).toMatch(/charge #\d+ \(run on browser\)\n[\s\S]*attempt 1 failed[\s\S]*retrying with the same key/);
    expect(await ledger()).toBe(charges + 1);
    await expect.poll(shownCharges).toBe(charges + 1);
    const rows = await page.locator('#charges li').allTextContents();
    expect(rows.filter((r) => r.includes('42.00 EUR'))).toHaveLength(1);
    await page.screenshot({ path: `${artifacts}checkout-dropped-response.png`, fullPage: true });
  });
});

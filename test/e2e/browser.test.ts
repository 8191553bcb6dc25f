/**
 * The checkout page in a real browser (Debian's chromium, headless, driven by
 * playwright-core) against a real instance: each outcome a person should see
 * is on the page (a first run with its time, a replay with the original time,
 * a double click whose 409 was retried, a 422 for the same key with another
 * amount, the instance that answered), amounts are shown with their currency
 * and cents, What happened has one entry per event and words a replay as one,
 * no request of the page fails but those the tests provoke, and the ledger
 * holds one charge per key.
 */
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Browser, BrowserContext, Page, Route } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
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
/** The page's requests that failed or got a status of 400 or more, and its console errors. */
const failed: string[] = [];
const consoleErrors: string[] = [];
/** What the instance printed. */
let output = '';

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
  app.process.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  browser = await launchChromium();
  page = await browser.newPage({ timezoneId: TIME_ZONE });
  page.on('requestfailed', (request) => failed.push(`${request.url()} ${request.failure()?.errorText}`));
  page.on('response', (response) => {
    if (response.status() >= 400) failed.push(`${response.url()} ${response.status()}`);
  });
  page.on('console', (message) => {
    if (message.type() === 'error') consoleErrors.push(`${message.location().url} ${message.text()}`);
  });
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
const lines = async (on: Page = page): Promise<Line[]> => {
  const shown = await on.locator('#results li').evaluateAll((items) =>
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
/** What happened, one entry per event, oldest first, without the time. */
const events = async () => (await page.locator('#log li .what').allTextContents()).reverse();
/** The shortened key, as the page shows it. */
const short = (key: string) => `${key.slice(0, 8)}…`;

/** Waits until Results has `count` more lines than `before` and none is pending; returns the new ones, oldest first. */
const settled = async (before: number, count: number, on: Page = page): Promise<Line[]> => {
  await expect
    .poll(async () => (await lines(on)).filter((l) => l.outcome !== 'pending').length, { timeout: 20_000 })
    .toBe(before + count);
  const all = await lines(on);
  expect(all).toHaveLength(before + count);
  return all.slice(before);
};

describe('checkout page', () => {
  it('asks for the amount in the currency, with cents, beside the currency; shows a favicon without a request', async () => {
    expect(await page.locator('label[for="amount"]').textContent()).toBe('Amount');
    const amount = page.locator('#amount');
    expect(await amount.inputValue()).toBe('10.00');
    expect(await amount.getAttribute('step')).toBe('0.01');
    expect(await page.locator('#currency').inputValue()).toBe('EUR');
    expect(await page.locator('link[rel="icon"]').getAttribute('href')).toMatch(/^data:image\/svg\+xml,/);
    expect(await events()).toEqual([]);
  });

  it('a first Pay shows its time; the same key sent again is labelled Replayed, with the original time', async () => {
    await page.fill('#amount', '15.00');
    await page.click('#pay');
    const [first] = await settled(0, 1);
    expect(first).toMatchObject({ outcome: 'charged', instance: 'browser', retries: 0 });
    const charged = await chargedAt(first!.chargeId!);
    expect(first!.headline).toBe(`Charged at ${charged.shown}`);
    expect(first!.detail).toContain('15.00 EUR');
    expect(first!.detail).toContain('answered by browser');
    expect(await events()).toEqual([
      `Pay 15.00 EUR with key ${short(first!.key)}`,
      `Charged 15.00 EUR: charge #${first!.chargeId} on browser`,
    ]);

    // a second later, so that the time of the replay itself would differ from the original's
    await sleep(Math.max(0, charged.at.getTime() + 1_000 - Date.now()));
    await page.click('#resend'); // the amount in the form is unchanged
    const [again] = await settled(1, 1);
    expect(again).toMatchObject({ outcome: 'replayed', key: first!.key, instance: 'browser', retries: 0 });
    expect(again!.headline).toBe(`Replayed — originally charged at ${charged.shown}`);
    expect(again!.chargeId).toBe(first!.chargeId);
    expect(again!.detail).toContain('not charged again');
    expect(again!.detail).toContain('answered by browser');
    // the replay is worded as one in What happened too, with the original charge's time
    expect((await events()).slice(2)).toEqual([
      `Resend 15.00 EUR with key ${short(first!.key)}`,
      `Replayed charge #${first!.chargeId} (15.00 EUR, charged at ${charged.shown} on browser): not charged again; answered by browser`,
    ]);
    // every amount on the page is in euros with cents, never the API's cents
    expect(await page.locator('body').textContent()).not.toMatch(/\b1500\b/);
    await app.waitFor(/"result":"replayed"/);
    expect(await ledger()).toBe(1);
    await expect.poll(shownCharges).toBe(1);
    expect(await page.locator('#charges li').allTextContents()).toEqual([`#${first!.chargeId}  15.00 EUR  on browser`]);
    await page.screenshot({ path: `${artifacts}checkout-replayed.png`, fullPage: true });
  });

  it('a double click: the second submit meets 409 in flight, is retried by the link, and gets the replay', async () => {
    const before = (await lines()).length;
    const logged = (await events()).length;
    const charges = await ledger();
    await page.fill('#amount', '25.00');
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
    // What happened, one entry per event: two clicks, the link's retries of the 409, one charge, one replay
    const key = short(ran!.key);
    const log = (await events()).slice(logged);
    expect(log).toHaveLength(2 + retried!.retries + 2);
    expect(log.slice(0, 2)).toEqual([`Pay 25.00 EUR with key ${key}`, `Pay 25.00 EUR with key ${key}`]);
    const retries = log.filter((e) => e.startsWith('attempt '));
    expect(retries).toHaveLength(retried!.retries);
    expect(retries[0]).toMatch(
      new RegExp(
        `^attempt 1 failed \\(A request with this idempotency key is still being processed.*\\); retrying with the same key ${key} in \\d+ ms$`,
      ),
    );
    expect(log.filter((e) => e.startsWith('Charged'))).toEqual([
      `Charged 25.00 EUR: charge #${ran!.chargeId} on browser`,
    ]);
    expect(log.at(-1)).toBe(
      `Replayed charge #${ran!.chargeId} (25.00 EUR, charged at ${charged.shown} on browser): not charged again; answered by browser`,
    );
    expect(await ledger()).toBe(charges + 1);
    await expect.poll(shownCharges).toBe(charges + 1);
    await page.screenshot({ path: `${artifacts}checkout-double-click.png`, fullPage: true });
  });

  it('the same key with another amount is refused with 422, explained; a new Pay gets a new key', async () => {
    const before = (await lines()).length;
    const logged = (await events()).length;
    const charges = await ledger();
    const lastKey = (await lines()).at(-1)!.key;
    await page.fill('#amount', '26.00'); // the last Pay was 25.00 EUR
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
    expect((await events()).slice(logged)).toEqual([
      `Resend 26.00 EUR with key ${short(lastKey)}`,
      'Resend 26.00 EUR refused: 422 payload_mismatch, the key was used for another amount (it paid 25.00 EUR)',
      `Pay 26.00 EUR with key ${short(paid!.key)}`,
      `Charged 26.00 EUR: charge #${paid!.chargeId} on browser`,
    ]);
  });

  it('a Pay whose response is dropped is retried with the same key and answered by the replay, each logged once', async () => {
    const before = (await lines()).length;
    const logged = (await events()).length;
    const charges = await ledger();
    await page.check('#drop');
    await expect
      .poll(async () => (await events()).slice(logged))
      .toEqual(['the server will drop its next payments.create response (after charging)']);
    await page.fill('#amount', '42.00');
    await page.click('#pay');
    await app.waitFor(/"response_dropped"/);
    const [line] = await settled(before, 1);
    // the first attempt got no answer; the link retried with the same key and the server replayed the charge
    expect(line).toMatchObject({ outcome: 'replayed', instance: 'browser', retries: 1 });
    expect(line!.retried).toMatch(/^Retried 1× by the client link with the same key, after: no answer \(/);
    const charged = await chargedAt(line!.chargeId!);
    expect(line!.headline).toBe(`Replayed — originally charged at ${charged.shown}`);
    // What happened: the Pay, its failed attempt retried with the same key, the replay; each once
    const key = short(line!.key);
    const log = (await events()).slice(logged + 1);
    expect(log).toHaveLength(3);
    expect(log[0]).toBe(`Pay 42.00 EUR with key ${key}`);
    expect(log[1]).toMatch(
      new RegExp(`^attempt 1 failed \\(Failed to fetch\\); retrying with the same key ${key} in \\d+ ms$`),
    );
    expect(log[2]).toBe(
      `Replayed charge #${line!.chargeId} (42.00 EUR, charged at ${charged.shown} on browser): not charged again; answered by browser`,
    );
    // the server dropped one response and says so once (tRPC's res.write and res.end both reach the drop)
    const afterDrop = () => output.slice(output.indexOf('"event":"response_dropped"'));
    await expect.poll(afterDrop).toMatch(/"result":"replayed"/);
    expect(output.match(/"event":"response_dropped"/g)).toHaveLength(1);
    expect(failed.filter((f) => f.includes('ERR_CONTENT_LENGTH_MISMATCH'))).toHaveLength(1);
    expect(await ledger()).toBe(charges + 1);
    await expect.poll(shownCharges).toBe(charges + 1);
    const rows = await page.locator('#charges li').allTextContents();
    expect(rows.filter((r) => r.includes('42.00 EUR'))).toHaveLength(1);
    await page.screenshot({ path: `${artifacts}checkout-dropped-response.png`, fullPage: true });
  });

  it('no request of the page failed but the payment calls the tests provoked; none asked for a favicon', async () => {
    const provoked = /\/trpc\/payments\.create\?batch=1 /;
    expect(failed.filter((f) => !provoked.test(f))).toEqual([]);
    // the 422, the dropped response (the double click's 409 came in a batch with the charge: 207)
    expect(failed.map((f) => f.replace(/^.*\?batch=1 /, ''))).toEqual(['422', 'net::ERR_CONTENT_LENGTH_MISMATCH']);
    // Chromium fetches the favicon itself: Playwright reports no request for it, only the console
    // error of a failed load, located at its URL (/favicon.ico when the page names no icon).
    expect(consoleErrors.filter((e) => !provoked.test(e))).toEqual([]);
  });
});

/**
 * Payments that outlive the page: the page holds each payment as a TanStack Query mutation whose
 * variables carry its key (withIdempotencyKey), persisted in localStorage. A tab of its own, in a
 * browser context of its own (its own localStorage and network), on the same instance and browser.
 */
describe('a payment across a reload, a closed tab, the network and TanStack retries', () => {
  let context: BrowserContext;
  beforeAll(async () => {
    context = await browser.newContext({ timezoneId: TIME_ZONE });
  });
  afterAll(async () => {
    await context?.close();
  });
  // A test that failed leaves no tab behind to resume its payment in the next one.
  const tabs: Page[] = [];
  afterEach(async () => {
    await Promise.all(tabs.splice(0).map((tab) => tab.close()));
  });

  /** A new tab on the page, once it has restored what was persisted. */
  const open = async (query = '', before?: (tab: Page) => Promise<unknown>) => {
    const tab = await context.newPage();
    tabs.push(tab);
    await before?.(tab);
    await tab.goto(`${app.url}/${query}`);
    await tab.waitForSelector('body[data-restored]');
    return tab;
  };
  /** The key of each payments.create request the tab sends (one call per request: nothing else is batched with it). */
  const wire = (tab: Page) => {
    const keys: string[] = [];
    tab.on('request', (request) => {
      if (request.url().includes('/trpc/payments.create')) keys.push(request.headers()['idempotency-key-0'] ?? '');
    });
    return keys;
  };
  /** The payments the page has persisted: key, status, paused. */
  const persisted = async (tab: Page) => {
    // runs in the page (the test's tsconfig has no DOM types)
    const stored = await tab.evaluate(() =>
      (globalThis as unknown as { localStorage: { getItem(key: string): string | null } }).localStorage.getItem(
        'checkout-payments',
      ),
    );
    if (stored === null) return [];
    const { mutations } = JSON.parse(stored).clientState as {
      mutations: { state: { status: string; isPaused: boolean; variables: { '~idempotency': { key: string } } } }[];
    };
    return mutations.map(({ state }) => ({
      key: state.variables['~idempotency'].key,
      status: state.status,
      isPaused: state.isPaused,
    }));
  };
  /**
   * Lets the tab's first payments.create reach the server, which charges and answers, and keeps
   * the answer from the page, which waits on as for a lost response; later ones pass.
   */
  const holdFirstAnswer = async (tab: Page) => {
    const held: Route[] = [];
    let first = true;
    await tab.route('**/trpc/payments.create**', async (route) => {
      if (!first) return route.continue();
      first = false;
      await route.fetch();
      held.push(route); // answered, never fulfilled
    });
    return held;
  };

  it('an answer lost, the page reloaded while the payment waits: the reload sends the key again and shows the replay; one charge', async () => {
    const tab = await open();
    const keys = wire(tab);
    const charges = await ledger();
    const held = await holdFirstAnswer(tab);
    await tab.fill('#amount', '51.00');
    await tab.click('#pay');
    await expect.poll(() => held.length, { timeout: 20_000 }).toBe(1);
    expect(await ledger()).toBe(charges + 1); // charged; the page has no answer
    const [key] = keys;
    await expect.poll(() => persisted(tab)).toEqual([{ key, status: 'pending', isPaused: false }]);

    await tab.reload();
    await tab.waitForSelector('body[data-restored="1"]');
    const [resumed] = await settled(0, 1, tab);
    expect(resumed).toMatchObject({ outcome: 'replayed', key, retries: 0, instance: 'browser' });
    const charged = await chargedAt(resumed!.chargeId!);
    expect(resumed!.headline).toBe(`Replayed — originally charged at ${charged.shown}`);
    expect(resumed!.detail).toContain('51.00 EUR, not charged again');
    expect(keys).toEqual([key, key]);
    expect(await ledger()).toBe(charges + 1);
    await expect.poll(() => persisted(tab)).toEqual([]);
    await tab.screenshot({ path: `${artifacts}checkout-reload-replayed.png`, fullPage: true });
    await tab.close();
  });

  it('offline: the payment waits with its key, outlives its tab, and is charged once when the page opens online', async () => {
    const tab = await open();
    const sentBefore = wire(tab);
    const charges = await ledger();
    await context.setOffline(true);
    await tab.fill('#amount', '52.00');
    await tab.click('#pay');
    await expect.poll(async () => (await lines(tab)).map((l) => l.outcome)).toEqual(['paused']);
    const [waiting] = await lines(tab);
    expect(waiting!.headline).toBe('Waiting for the network — sent with the same key once back online');
    await expect.poll(() => persisted(tab)).toEqual([{ key: waiting!.key, status: 'pending', isPaused: true }]);
    // offline the page cannot load again: a reload ends on the browser's error page; the tab is closed
    await expect(tab.reload()).rejects.toThrow(/ERR_INTERNET_DISCONNECTED/);
    await tab.close();
    expect(sentBefore).toEqual([]); // nothing left the browser

    await context.setOffline(false);
    let keys: string[] = [];
    const next = await open('', async (tab) => {
      keys = wire(tab);
    });
    expect(await next.getAttribute('body', 'data-restored')).toBe('1');
    const [paid] = await settled(0, 1, next);
    // 'replayed' in some runs: the server got the key twice while the page sent it once (a resend
    // below the page as the emulated network comes back); the second met the first in flight (409)
    // and the link got its outcome. One charge either way.
    expect(['charged', 'replayed']).toContain(paid!.outcome);
    expect(paid).toMatchObject({ key: waiting!.key, instance: 'browser' });
    expect(paid!.detail).toContain('52.00 EUR');
    expect(keys.length).toBeGreaterThanOrEqual(1);
    expect(new Set(keys)).toEqual(new Set([waiting!.key]));
    expect(await ledger()).toBe(charges + 1);
    await expect.poll(() => persisted(next)).toEqual([]);
  });

  it('TanStack Query retry: 3 (the link not retrying), two answers dropped: three requests with one key, one charge, the replay shown', async () => {
    const tab = await open('?retry=3');
    const keys = wire(tab);
    const charges = await ledger();
    let dropped = 0;
    await tab.route('**/trpc/payments.create**', async (route) => {
      if (dropped === 2) return route.continue();
      dropped++;
      await route.fetch(); // the server charges (or replays) and answers; the answer is lost
      await route.abort('connectionreset');
    });
    await tab.fill('#amount', '53.00');
    await tab.click('#pay');
    const [line] = await settled(0, 1, tab);
    expect(line).toMatchObject({ outcome: 'replayed', retries: 2, instance: 'browser' });
    expect(line!.retried).toMatch(
      /^Retried 2× by TanStack Query with the same key, after: no answer \(.*\); no answer/,
    );
    expect(keys).toEqual([line!.key, line!.key, line!.key]);
    expect(await ledger()).toBe(charges + 1);
    await tab.close();
  });

  it('a key older than the server keeps answers (24 h) is not sent: the payment is shown as unresolved, never charged twice', async () => {
    const tab = await open();
    const charges = await ledger();
    const held = await holdFirstAnswer(tab);
    await tab.fill('#amount', '54.00');
    await tab.click('#pay');
    await expect.poll(() => held.length, { timeout: 20_000 }).toBe(1);
    await expect.poll(async () => (await persisted(tab)).length).toBe(1);
    const [pending] = await persisted(tab);
    expect(pending).toMatchObject({ status: 'pending', isPaused: false });
    await tab.close(); // the tab is closed while the payment waits for its answer

    // the next visit, 25 h later by the browser's clock
    const later = await open('', (next) =>
      next.addInitScript(() => {
        const realNow = Date.now;
        Date.now = () => realNow() + 25 * 3_600_000;
      }),
    );
    const keys = wire(later);
    const [line] = await settled(0, 1, later);
    expect(line).toMatchObject({ outcome: 'unresolved', key: pending!.key });
    expect(line!.headline).toMatch(
      /^Unresolved — not sent again: its key was made at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d, longer ago than the server keeps its answer \(24 h\)$/,
    );
    expect(line!.detail).toContain('Check Charges below before paying again');
    expect(keys).toEqual([]);
    expect(await ledger()).toBe(charges + 1); // the first request's charge, once
    await expect.poll(() => persisted(later)).toEqual([]);
    await later.screenshot({ path: `${artifacts}checkout-key-expired.png`, fullPage: true });
    await later.close();
  });
});

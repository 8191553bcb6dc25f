/**
 * "Crash this instance mid-payment": payments.create charges at the card
 * provider in a step, and the instance running it dies (SIGKILL) right after
 * that step is recorded, before its ledger write. Once the dead claim expires,
 * a retry on another instance resumes after the recorded charge step: one
 * charge at the provider, one ledger row. Over plain HTTP (instances sharing
 * Redis), then on the checkout page in Chromium behind a round-robin balancer
 * (instances sharing PostgreSQL, transactional mode).
 */

import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium } from '../helpers/browser.js';
import { isolatedSchema, type PgSchema } from '../helpers/postgres.js';
import { connectRedis, deleteByPrefix, sleep, uniquePrefix } from '../helpers/redis.js';
import {
  type Balancer,
  type Instance,
  providerCharges,
  startBalancer,
  startInstance,
  startProvider,
} from './helpers.js';

const artifacts = fileURLToPath(new URL('../../test-artifacts/', import.meta.url));
const LOCK_TTL = 3_000;

interface Created {
  id: number;
  instance: string;
  providerChargeId: string;
  provider: { id: string; key: string; instance: string };
  steps: { ran: string[]; resumed: string[] };
}

/** payments.create over plain HTTP; `crash` asks the instance to die after the charge step. */
async function create(instance: Instance, opts: { user: string; key: string; crash?: boolean }) {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'x-user': opts.user,
    'idempotency-key': opts.key,
  };
  if (opts.crash) headers['x-demo-crash'] = 'after-charge';
  const response = await fetch(`${instance.url}/trpc/payments.create`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ amount: 1234, currency: 'EUR', clientTimestamp: Date.now() }),
  });
  const body = (await response.json()) as {
    result?: { data: Created };
    error?: { data?: { idempotency?: { reason: string } } };
  };
  return {
    status: response.status,
    instance: response.headers.get('x-instance-id'),
    replayed: response.headers.get('idempotent-replayed') === 'true',
    data: body.result?.data,
    reason: body.error?.data?.idempotency?.reason,
  };
}

describe('over HTTP: two instances sharing Redis, one card provider', () => {
  const redis = connectRedis();
  const prefix = uniquePrefix('e2e-crash');
  let pgs: PgSchema;
  let provider: Instance;
  let a: Instance;
  let b: Instance;
  let memory: Instance | undefined;

  beforeAll(async () => {
    pgs = await isolatedSchema('e2e_crash_http', 2, false);
    provider = await startProvider();
    const env = {
      IDEMPOTENCY_STORE: 'redis',
      REDIS_PREFIX: prefix,
      DATABASE_URL: pgs.url,
      PROVIDER_URL: provider.url,
      LOCK_TTL: String(LOCK_TTL),
      LOG_EVENTS: '1',
    };
    [a, b] = await Promise.all([startInstance('crash-a', env), startInstance('crash-b', env)]);
  });
  afterAll(async () => {
    await Promise.all([a, b, memory, provider].map((i) => i?.kill('SIGKILL')));
    await deleteByPrefix(redis, prefix);
    redis.disconnect();
    await pgs?.drop();
  });

  const ledger = async (user: string) =>
    (
      await pgs.pool.query<{ provider_charge_id: string | null; instance: string }>(
        'select provider_charge_id, instance from charges where user_id = $1',
        [user],
      )
    ).rows;

  it('the instance dies after the charge step; the retry on the other resumes it: one provider charge, one ledger row', async () => {
    const user = randomUUID();
    const key = randomUUID();
    const lost = await create(a, { user, key, crash: true }).catch((error: Error) => error);
    expect(lost).toBeInstanceOf(Error); // no answer: the process is gone
    await a.exited;
    expect(a.process.signalCode).toBe('SIGKILL');
    await a.waitFor(/"result":"step".*"step":"charge".*"reason":"ran"/);
    await a.waitFor(/"event":"crash"/);
    // charged at the provider, nothing in the ledger yet
    expect((await providerCharges(provider)).charges).toHaveLength(1);
    expect(await ledger(user)).toEqual([]);

    // the dead instance's claim holds until lockTtl: 409, and the provider is not called
    expect(await create(b, { user, key })).toMatchObject({ status: 409, reason: 'in_progress' });
    await sleep(LOCK_TTL + 300);
    const resumed = await create(b, { user, key });
    expect(resumed).toMatchObject({ status: 200, instance: 'crash-b', replayed: false });
    expect(resumed.data).toMatchObject({
      instance: 'crash-b',
      steps: { ran: [], resumed: ['charge'] },
      provider: { instance: 'crash-a' },
    });
    await b.waitFor(/"result":"step".*"step":"charge".*"reason":"resumed"/);

    const atProvider = await providerCharges(provider, resumed.data!.provider.key);
    expect(atProvider.calls).toBe(1);
    expect(atProvider.charges).toMatchObject([{ id: resumed.data!.provider.id, amount: 1234, requests: 1 }]);
    expect(await ledger(user)).toEqual([{ provider_charge_id: resumed.data!.provider.id, instance: 'crash-b' }]);

    // done: the same key is a replay of the resumed run
    const again = await create(b, { user, key });
    expect(again).toMatchObject({ status: 200, replayed: true, data: { id: resumed.data!.id } });
    expect((await providerCharges(provider)).calls).toBe(1);
    expect(await ledger(user)).toHaveLength(1);
  });

  it('with the memory store (as npm run demo) the control is off: the header is ignored and the instance lives', async () => {
    // The ledger on PostgreSQL rather than PGlite: the control depends on the store only.
    memory = await startInstance('crash-memory', { IDEMPOTENCY_STORE: 'memory', DATABASE_URL: pgs.url });
    const config = await (await fetch(`${memory.url}/demo/config`)).json();
    expect(config).toEqual({ instance: 'crash-memory', store: 'memory', lockTtl: 30_000, crashable: false });
    const paid = await create(memory, { user: randomUUID(), key: randomUUID(), crash: true });
    expect(paid).toMatchObject({ status: 200, data: { steps: { ran: ['charge'], resumed: [] } } });
    expect(memory.process.exitCode).toBeNull();
    expect(memory.process.signalCode).toBeNull();
  });
});

describe('the checkout page: two instances sharing PostgreSQL behind a round-robin balancer', () => {
  let pgs: PgSchema;
  let provider: Instance;
  let instances: Instance[];
  let balancer: Balancer;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    mkdirSync(artifacts, { recursive: true });
    pgs = await isolatedSchema('e2e_crash_browser', 2, false);
    provider = await startProvider();
    // The PostgreSQL store: the ledger row and the stored answer commit together.
    const env = {
      IDEMPOTENCY_STORE: 'postgres',
      DATABASE_URL: pgs.url,
      PROVIDER_URL: provider.url,
      LOCK_TTL: String(LOCK_TTL),
      CHARGE_DELAY_MS: '200',
      LOG_EVENTS: '1',
    };
    instances = await Promise.all([startInstance('page-a', env), startInstance('page-b', env)]);
    balancer = await startBalancer(instances);
    browser = await launchChromium();
    page = await browser.newPage();
    await page.goto(balancer.url);
    await page.waitForSelector('body[data-ready="true"]');
    await page.waitForSelector('#count:has-text("(0)")');
  });
  afterAll(async () => {
    await browser?.close();
    await balancer?.close();
    await Promise.all([...(instances ?? []), provider].map((i) => i?.kill('SIGKILL')));
    await pgs?.drop();
  });

  it('Crash, then Pay: the retry on the other instance shows the charge reused from the crashed attempt', async () => {
    expect(await page.locator('#crash').isEnabled()).toBe(true);
    expect(await page.locator('#crash-note').textContent()).toContain('lockTtl 3 s');
    await page.check('#crash');
    await page.fill('#amount', '31.00');
    await page.click('#pay');

    await expect
      .poll(() => page.locator('#results li').first().getAttribute('data-outcome'), { timeout: 30_000 })
      .not.toBe('pending');
    const crashed = instances.filter((i) => i.process.signalCode === 'SIGKILL');
    expect(crashed).toHaveLength(1);
    const [dead] = crashed;
    const survivor = instances.find((i) => i !== dead)!;
    await dead!.waitFor(/"event":"crash"/);
    await survivor.waitFor(/"result":"step".*"step":"charge".*"reason":"resumed"/);

    const line = page.locator('#results li').first();
    expect(await line.getAttribute('data-outcome')).toBe('resumed');
    expect(await line.getAttribute('data-resumed')).toBe('charge');
    expect(await line.getAttribute('data-instance')).toBe(survivor.name);
    expect(await line.locator('.outcome').textContent()).toBe(
      `Charge reused from the crashed attempt on ${dead!.name}; finished by ${survivor.name}`,
    );
    const detail = (await line.locator('.detail').textContent()) ?? '';
    const chargeId = /provider charge (ch_\d+) made once by/.exec(detail)?.[1];
    expect(detail).toContain(`provider charge ${chargeId} made once by ${dead!.name}, not charged again`);
    const ledgerId = new RegExp(`ledger charge #(\\d+), 31.00 EUR written by ${survivor.name}`).exec(detail)?.[1];
    expect(ledgerId).toBeDefined();
    // the link retried with the same key until the dead claim expired
    expect(Number(await line.getAttribute('data-retries'))).toBeGreaterThanOrEqual(1);
    expect(await line.locator('.retried').textContent()).toMatch(
      /^Retried \d+× by the client link with the same key, after: .*409 conflict: this key's first call was still running/,
    );
    // What happened: one entry for the outcome, that says the charge was reused, not made again
    const log = await page.locator('#log li .what').allTextContents();
    expect(log.filter((e) => /^(Charged|Replayed|Charge #)/.test(e))).toEqual([
      `Charge #${ledgerId} (31.00 EUR) finished by ${survivor.name}: resumed after the charge step recorded by ${dead!.name}, provider charge ${chargeId} reused, not charged again`,
    ]);

    // one charge at the provider for the step's key, one ledger row
    const all = await providerCharges(provider);
    expect(all.calls).toBe(1);
    expect(all.charges).toHaveLength(1);
    const [charge] = all.charges;
    expect(charge).toMatchObject({ id: chargeId, amount: 3100, requests: 1 });
    expect((await providerCharges(provider, charge!.key)).charges).toHaveLength(1);
    const { rows } = await pgs.pool.query<{ n: number }>(
      'select count(*)::int as n from charges where provider_charge_id = $1',
      [chargeId],
    );
    expect(rows[0]!.n).toBe(1);
    expect((await pgs.pool.query('select * from charges')).rows).toHaveLength(1);
    await expect.poll(() => page.locator('#charges li').count()).toBe(1);
    expect(await page.locator('#crash').isChecked()).toBe(false);
    await page.screenshot({ path: `${artifacts}checkout-crash-resumed.png`, fullPage: true });
  });
});

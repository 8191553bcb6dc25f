/**
 * The example app on a MySQL/MariaDB or a SQLite idempotency store
 * (IDEMPOTENCY_STORE=mysql | sqlite, IDEMPOTENCY_DATABASE_URL), the ledger in
 * PGlite: one instance, as a separate process, creates the store's tables
 * itself; one key paid twice charges once and replays.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { isolatedDatabase } from '../helpers/mysql.js';
import { sqliteFile } from '../helpers/sqlite.js';
import { type Instance, pay, providerCharges, startInstance, startProvider } from './helpers.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

const stores = {
  mysql: async () => {
    const database = await isolatedDatabase('e2e', 1, false);
    cleanups.push(() => database.drop());
    return database.url;
  },
  sqlite: async () => {
    const file = await sqliteFile('e2e', false);
    cleanups.push(() => file.drop());
    return `sqlite:${file.path}`;
  },
};

describe.each(['mysql', 'sqlite'] as const)('the example app on the %s store', (store) => {
  it('creates its tables; one key paid twice charges once, and the second answer is a replay', async () => {
    const [url, provider] = await Promise.all([stores[store](), startProvider()]);
    cleanups.push(() => provider.kill('SIGKILL'));
    const instance: Instance = await startInstance(`${store}-a`, {
      IDEMPOTENCY_STORE: store,
      IDEMPOTENCY_DATABASE_URL: url,
      PROVIDER_URL: provider.url,
    });
    cleanups.push(() => instance.kill('SIGKILL'));
    const user = randomUUID();
    const key = randomUUID();
    const first = await pay(instance, { user, key, clientTimestamp: 1 });
    expect(first).toMatchObject({ status: 200, replayed: false });
    const retry = await pay(instance, { user, key, clientTimestamp: 2 });
    expect(retry).toMatchObject({ status: 200, replayed: true, chargeId: first.chargeId });
    // the provider is this test's own: one charge, one request for it
    const atProvider = await providerCharges(provider);
    expect(atProvider.charges).toHaveLength(1);
    expect(atProvider.calls).toBe(1);
  });
});

/**
 * The store on SQLite (drizzleStore on a Drizzle SQLite database): the store
 * contract and the admin contract through better-sqlite3 and through libSQL,
 * on one file.
 */
import { describe } from 'vitest';
import { describeStoreContract } from '../contract/store-contract.js';
import { sleep } from '../helpers/redis.js';
import { liveStores } from '../helpers/stores.js';

const live = liveStores('sqlite-contract', ['sqlite (better-sqlite3)', 'sqlite (libsql)']);
// The contract's tests wait mostly on lease expiries, and each works on keys of its own: run concurrently, they keep
// this file within a few seconds.
describe.concurrent('sqlite', () => {
  for (const { name, make, notifies } of live.stores)
    describeStoreContract(name, () => ({ store: make(), advance: sleep }), { notifies });
});

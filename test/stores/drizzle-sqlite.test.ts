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
// One test at a time, as on every store: the contract's tests time lease expiries, and better-sqlite3 answers
// synchronously (a write waiting on the file's lock holds the thread), so tests run side by side would time
// each other's waits (a libSQL test failed its timing premise so on a loaded machine).
describe('sqlite', () => {
  for (const { name, make, notifies } of live.stores)
    describeStoreContract(name, () => ({ store: make(), advance: sleep }), { notifies });
});

/**
 * The model-based contract on the SQLite store (drizzleStore on a SQLite file): through better-sqlite3 and through
 * libSQL.
 */
import { describe } from 'vitest';
import { sleep } from '../helpers/redis.js';
import { liveStores } from '../helpers/stores.js';
import { modelTest } from './model-run.js';

const live = liveStores('model', ['sqlite (better-sqlite3)', 'sqlite (libsql)']);

// The two drivers one after the other, as every store's model runs (sequences time expiries).
describe('sqlite', () => {
  for (const { name, make } of live.stores)
    modelTest(name, () => ({ store: make(), clock: Date.now, advance: sleep, slack: 2 }), 50);
});

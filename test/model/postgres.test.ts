/**
 * The model-based contract on the PostgreSQL store: node-postgres at each isolation level the store contract
 * uses, postgres.js with and without prepared statements, and PGlite.
 */
import { sleep } from '../helpers/redis.js';
import { liveStores } from '../helpers/stores.js';
import { modelTest } from './model-run.js';

const live = liveStores('model', [
  'postgres',
  'postgres, REPEATABLE READ',
  'postgres, SERIALIZABLE',
  'postgres, postgres.js',
  'postgres, postgres.js, prepare: false',
  'PGlite',
]);

for (const { name, make } of live.stores)
  modelTest(name, () => ({ store: make(), clock: Date.now, advance: sleep, slack: 2 }), 50);

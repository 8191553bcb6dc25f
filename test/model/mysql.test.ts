/**
 * The model-based contract on the MySQL/MariaDB store (drizzleStore on mysql2): a pool, and one connection
 * serving every call.
 */
import { sleep } from '../helpers/redis.js';
import { liveStores } from '../helpers/stores.js';
import { modelTest } from './model-run.js';

const live = liveStores('model', ['mariadb', 'mariadb, single connection']);

for (const { name, make } of live.stores)
  modelTest(name, () => ({ store: make(), clock: Date.now, advance: sleep, slack: 2 }), 50);

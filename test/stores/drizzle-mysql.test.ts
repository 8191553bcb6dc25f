/**
 * The store on MySQL/MariaDB (drizzleStore on a Drizzle mysql2 database): the
 * store contract and the admin contract on a pool and on one connection.
 */
import { describeStoreContract } from '../contract/store-contract.js';
import { sleep } from '../helpers/redis.js';
import { liveStores } from '../helpers/stores.js';

const live = liveStores('mysql-contract', ['mariadb', 'mariadb, single connection']);
for (const { name, make, notifies } of live.stores)
  describeStoreContract(name, () => ({ store: make(), advance: sleep }), { notifies });

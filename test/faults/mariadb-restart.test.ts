/**
 * MariaDB restarted under load, as postgres-restart.test.ts on PostgreSQL: a
 * MariaDB server of this file's own (in a temporary directory), an app on a
 * mysql2 pool, clients with keys that retry 409 and 503. The server is
 * restarted twice while the load runs: a clean shutdown (SIGTERM, sessions
 * ended) and a crash (SIGKILL, InnoDB recovery from its redo log).
 */
import { drizzle } from 'drizzle-orm/mysql2';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { drizzleStore } from '../../src/drizzle.js';
import { type PayApp, startPayApp } from '../fixtures/pay-app.js';
import { type PrivateMariadb, startPrivateMariadb } from '../helpers/mariadb-server.js';
import { restartTwiceUnderLoad } from './helpers/restart-mid-load.js';

const LOCK_TTL = 3_000; // storeTimeout 1 s must be at most lockTtl / 3

let server: PrivateMariadb;
let pool: mysql.Pool;
let app: PayApp;
beforeAll(async () => {
  server = await startPrivateMariadb();
  pool = mysql.createPool({ uri: server.url, connectionLimit: 10, connectTimeout: 1_000 });
  app = await startPayApp({ store: drizzleStore({ db: drizzle(pool) }), lockTtl: LOCK_TTL, storeTimeout: 1_000 });
});
afterAll(async () => {
  await app?.close();
  await pool?.end().catch(() => {});
  await server?.destroy();
});

describe('MariaDB restarted mid-load', () => {
  it('the store recovers without restarting the app; nothing runs twice or is lost unless a completion failed and said so', async () => {
    await restartTwiceUnderLoad('mariadb restart', server, app);
  });
});

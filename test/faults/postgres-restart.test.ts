/**
 * PostgreSQL restarted under load: a PostgreSQL server of this file's own
 * (started as the postgres user in a temporary directory), an app on a
 * node-postgres pool, clients with keys that retry 409 and 503. The server
 * is restarted twice while the load runs: a clean restart (`pg_ctl -m fast`,
 * sessions terminated) and a crash (`-m immediate`, recovery from the WAL).
 */
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { drizzleStore } from '../../src/drizzle.js';
import { type PayApp, startPayApp } from '../fixtures/pay-app.js';
import { type PrivatePostgres, startPrivatePostgres } from '../helpers/postgres-server.js';
import { restartTwiceUnderLoad } from './helpers/restart-mid-load.js';

const LOCK_TTL = 3_000; // storeTimeout 1 s must be at most lockTtl / 3

let server: PrivatePostgres;
let pool: pg.Pool;
let app: PayApp;
beforeAll(async () => {
  server = await startPrivatePostgres();
  pool = new pg.Pool({ connectionString: server.url, max: 10 });
  // Idle connections die with the server: without a listener, that would crash the app.
  pool.on('error', () => {});
  app = await startPayApp({ store: drizzleStore({ db: drizzle(pool) }), lockTtl: LOCK_TTL, storeTimeout: 1_000 });
});
afterAll(async () => {
  await app?.close();
  await pool?.end().catch(() => {});
  await server?.destroy();
});

describe('PostgreSQL restarted mid-load', () => {
  it('the store recovers without restarting the app; nothing runs twice or is lost unless a completion failed and said so', async () => {
    await restartTwiceUnderLoad(
      'postgres restart',
      { stop: (kind) => server.stop(kind === 'clean' ? 'fast' : 'immediate'), start: () => server.start() },
      app,
    );
  });
});

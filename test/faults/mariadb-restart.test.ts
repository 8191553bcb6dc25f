/**
 * MariaDB restarted under load, as postgres-restart.test.ts on PostgreSQL: a
 * MariaDB server of this file's own (in a temporary directory), an app on a
 * mysql2 pool, clients with keys that retry 409 and 503. The server is
 * restarted twice while the load runs: a clean shutdown (SIGTERM, sessions
 * ended) and a crash (SIGKILL, InnoDB recovery from its redo log). Then one
 * request at a time: the server killed between a claim and its completion.
 */
import { randomUUID } from 'node:crypto';
import { drizzle } from 'drizzle-orm/mysql2';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { drizzleStore } from '../../src/drizzle.js';
import { type PayApp, pay, retryUntilAnswered, startPayApp } from '../fixtures/pay-app.js';
import { type PrivateMariadb, startPrivateMariadb } from '../helpers/mariadb-server.js';
import { gate } from '../helpers/trpc.js';
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

describe('MariaDB killed between a claim and its completion', () => {
  it('the claim survives InnoDB recovery; the holder’s completion lands once the server is back, the retry replays it: one execution', async () => {
    const key = randomUUID();
    const running = gate();
    app.hold(running.opened);
    const first = pay(app.url, key, { amount: 700 });
    await expect.poll(() => app.runs(key)).toBe(1);
    app.hold(undefined);

    await server.stop('crash');
    // a client retrying while MariaDB is down is refused: it does not run a second time
    expect(await pay(app.url, key, { amount: 700 })).toMatchObject({ status: 503, reason: 'store_unavailable' });
    await server.start();
    // the claim came back with the server (committed before the kill): a retry finds it held
    expect(await pay(app.url, key, { amount: 700 })).toMatchObject({ status: 409, reason: 'in_progress' });

    running.open();
    const answer = await first;
    expect(answer).toMatchObject({ status: 200, replayed: false });
    const retried = await retryUntilAnswered(() => pay(app.url, key, { amount: 700 }), LOCK_TTL + 2_000);
    expect(retried).toMatchObject({ status: 200, replayed: true, chargeId: answer.chargeId });
    expect(app.runs(key)).toBe(1);
  });
});

/**
 * MariaDB restarted under load, as postgres-restart.test.ts on PostgreSQL: a
 * MariaDB server of this file's own (in a temporary directory), an app on a
 * mysql2 pool, clients with keys that retry 409 and 503. The server is
 * restarted twice while the load runs: a clean shutdown (SIGTERM, sessions
 * ended) and a crash (SIGKILL, InnoDB recovery from its redo log).
 */
import { drizzle } from 'drizzle-orm/mysql2';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashRecordId } from '../../src/core/events.js';
import { recordId } from '../../src/core.js';
import { drizzleStore } from '../../src/drizzle.js';
import { type PayApp, startPayApp } from '../fixtures/pay-app.js';
import { type PrivateMariadb, startPrivateMariadb } from '../helpers/mariadb-server.js';
import { sleep } from '../helpers/redis.js';
import { conflictingResults, lostOutcomes, runLoad } from './helpers/load.js';

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
    const marks: Record<string, number> = {};
    const load = runLoad({ targets: () => [app.url], durationMs: 16_000, concurrency: 8, holdMs: () => 5 });
    await sleep(3_000);
    await server.stop('clean');
    marks.down1 = Date.now();
    await sleep(1_000);
    await server.start();
    marks.up1 = Date.now();
    await sleep(4_000);
    await server.stop('crash');
    marks.down2 = Date.now();
    await sleep(1_000);
    await server.start();
    marks.up2 = Date.now();
    const result = await load;

    const records = [...result.keys.values()];
    // the outages were felt: requests were refused with 503 while the server was away
    expect(result.byStatus[503] ?? 0).toBeGreaterThan(0);
    // and the app served again without a restart: operations begun after each restart succeeded
    expect(
      records.filter((r) => r.firstSentAt > marks.up1! && r.firstSentAt < marks.down2! && r.succeededAt !== undefined)
        .length,
    ).toBeGreaterThan(10);
    expect(records.filter((r) => r.firstSentAt > marks.up2! && r.succeededAt !== undefined).length).toBeGreaterThan(10);
    expect(records.filter((r) => r.failed !== undefined)).toEqual([]);

    // A second execution or a lost outcome is only possible for a key whose
    // completion failed (the server went away between the procedure and its
    // completion), and the engine reports each such failure as an event.
    const failedCompletions = new Set(
      app.events.filter((e) => e.result === 'store_error' && e.operation === 'complete').map((e) => e.keyHash),
    );
    const explained = (key: string) => failedCompletions.has(hashRecordId(recordId(undefined, 'pay', key)));
    const runsPerKey = new Map<string, number>();
    for (const e of app.executions) runsPerKey.set(e.key, (runsPerKey.get(e.key) ?? 0) + 1);
    const doubles = [...runsPerKey].filter(([, n]) => n > 1).map(([key]) => key);
    const conflicting = conflictingResults(result).map((r) => r.key);
    const lost = await lostOutcomes(result, () => app.url);
    expect(doubles.filter((key) => !explained(key))).toEqual([]);
    expect(conflicting.filter((key) => !explained(key))).toEqual([]);
    expect(lost.filter(({ key }) => !explained(key))).toEqual([]);

    const maxBlocked = Math.max(0, ...records.map((r) => r.blockedMs));
    console.info(
      `[mariadb restart] ${result.operations} operations (${result.duplicates} duplicates), ${result.requests} requests ` +
        `${JSON.stringify(result.byStatus)}, ${records.length} keys, ${app.executions.length} executions, ` +
        `${failedCompletions.size} failed completions, ${doubles.length} double executions, ${lost.length} lost outcomes, ` +
        `longest wait ${maxBlocked} ms`,
    );
    const storeErrors: Record<string, number> = {};
    for (const e of app.events)
      if (e.result === 'store_error')
        storeErrors[`${e.operation}: ${e.error?.message}`] =
          (storeErrors[`${e.operation}: ${e.error?.message}`] ?? 0) + 1;
    console.info('[mariadb restart] store errors', storeErrors);
  });
});

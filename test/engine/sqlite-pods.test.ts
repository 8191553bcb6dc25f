/**
 * Pods in separate Node processes sharing one SQLite file: N processes × one
 * key → one run, as mysql-pods.test.ts on MariaDB. The pods start together on
 * a fresh file and each migrates it (migrateIdempotencyKeys) as it starts. Two
 * pods on libSQL in transactional mode, one on better-sqlite3.
 */
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pay } from '../fixtures/pay-app.js';
import { type Pod, startPod } from '../helpers/pods.js';
import { type SqliteFile, sqliteFile } from '../helpers/sqlite.js';

const LOCK_TTL = 3_000; // storeTimeout is then 1 s (lockTtl / 3)
let file: SqliteFile;
let reader: Database.Database;
let pods: Pod[] = [];

beforeAll(async () => {
  file = await sqliteFile('pods', false);
  const env = { SQLITE_PATH: file.path, DATABASE_URL: '', MYSQL_URL: '', LOCK_TTL: String(LOCK_TTL) };
  pods = await Promise.all([
    startPod('a', env),
    startPod('b', env),
    startPod('c', { ...env, SQLITE_DRIVER: 'better-sqlite3' }),
  ]);
  reader = new Database(file.path, { readonly: true });
}, 60_000);
afterAll(async () => {
  await Promise.all(pods.map((p) => p.kill('SIGKILL')));
  reader?.close();
  file?.drop();
});

const rowsFor = (key: string): number =>
  (reader.prepare('select count(*) as n from charges where idem_key = ?').get(key) as { n: number }).n;

describe('three processes sharing a SQLite file', () => {
  it('60 concurrent calls with one key over three processes (two drivers): one execution, one business row, over 3 keys', async () => {
    // every pod migrated the fresh file as it started: the migrations were applied once
    expect(reader.prepare('select count(*) as n from __trpc_idempotency_migrations').get()).toEqual({ n: 1 });
    for (let round = 0; round < 3; round++) {
      const key = randomUUID();
      const results = await Promise.all(
        Array.from({ length: 60 }, (_, i) => pay(pods[i % 3]!.url, key, { amount: 100, holdMs: 30 })),
      );
      // 409: in flight. 503: the write lock not had within storeTimeout (fail-closed). Neither runs the charge.
      expect(
        results
          .filter((r) => r.status !== 200 && r.status !== 409 && r.status !== 503)
          .map((r) => JSON.stringify(r).slice(0, 600)),
      ).toEqual([]);
      const ok = results.filter((r) => r.status === 200);
      expect(rowsFor(key)).toBeLessThanOrEqual(1);
      if (ok.length === 0) {
        await expect
          .poll(async () => (await pay(pods[0]!.url, key, { amount: 100 })).status, { timeout: LOCK_TTL + 5_000 })
          .toBe(200);
      }
      expect(rowsFor(key)).toBe(1);
      expect(new Set(ok.map((r) => r.chargeId)).size).toBeLessThanOrEqual(1);
      const byStatus: Record<number, number> = {};
      for (const r of results) byStatus[r.status] = (byStatus[r.status] ?? 0) + 1;
      console.info(`[sqlite pods] round ${round}: ${JSON.stringify(byStatus)}`);
    }
  });
});

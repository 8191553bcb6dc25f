/**
 * Pods in separate Node processes sharing MariaDB, in transactional mode: N
 * processes × one key → one run, as postgres-pods.test.ts on PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pay } from '../fixtures/pay-app.js';
import { isolatedDatabase, type MysqlDatabase } from '../helpers/mysql.js';
import { type Pod, startPod } from '../helpers/pods.js';

const LOCK_TTL = 3_000; // storeTimeout is then 1 s (lockTtl / 3): 200 concurrent calls on a busy machine fit in it
let my: MysqlDatabase;
let pods: Pod[] = [];

beforeAll(async () => {
  my = await isolatedDatabase('pods', 4);
  await my.pool.query(
    'create table charges (id serial primary key, idem_key varchar(64) not null, amount int not null, pod varchar(64) not null)',
  );
  // DATABASE_URL empty: a PostgreSQL URL in the test's environment would otherwise win (see pay-app.ts).
  const env = { MYSQL_URL: my.url, DATABASE_URL: '', LOCK_TTL: String(LOCK_TTL) };
  pods = await Promise.all(['a', 'b', 'c'].map((name) => startPod(name, env)));
}, 60_000);
afterAll(async () => {
  await Promise.all(pods.map((p) => p.kill('SIGKILL')));
  await my?.drop();
});

async function rowsFor(key: string): Promise<number> {
  const [rows] = await my.pool.query('select count(*) as n from charges where idem_key = ?', [key]);
  return Number((rows as { n: number }[])[0]!.n);
}

describe('three processes sharing MariaDB', () => {
  it('150 concurrent calls with one key over three processes: one execution, one business row, repeated over 5 keys', async () => {
    for (let round = 0; round < 5; round++) {
      const key = randomUUID();
      const results = await Promise.all(
        Array.from({ length: 150 }, (_, i) => pay(pods[i % 3]!.url, key, { amount: 100, holdMs: 50 })),
      );
      // 409: in flight. 503: the claim waited longer than storeTimeout for a pooled connection on a busy
      // machine (fail-closed). Neither runs the charge.
      expect(results.filter((r) => r.status !== 200 && r.status !== 409 && r.status !== 503)).toEqual([]);
      const ok = results.filter((r) => r.status === 200);
      expect(await rowsFor(key)).toBeLessThanOrEqual(1);
      if (ok.length === 0) {
        await expect
          .poll(async () => (await pay(pods[0]!.url, key, { amount: 100 })).status, { timeout: LOCK_TTL + 5_000 })
          .toBe(200);
      }
      expect(await rowsFor(key)).toBe(1);
      expect(new Set(ok.map((r) => r.chargeId)).size).toBeLessThanOrEqual(1);
    }
  });
});

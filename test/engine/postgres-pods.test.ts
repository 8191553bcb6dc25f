/**
 * Pods in separate Node processes sharing PostgreSQL, in transactional mode:
 * concurrency across processes, and SIGKILL at each point of a charge.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pay } from '../fixtures/pay-app.js';
import { type Pod, startPod } from '../helpers/pods.js';
import { isolatedSchema, type PgSchema } from '../helpers/postgres.js';
import { sleep } from '../helpers/redis.js';

const LOCK_TTL = 3_000; // storeTimeout is then 1 s (lockTtl / 3): 200 concurrent calls on a busy machine fit in it
let pgs: PgSchema;
let pods: Pod[] = [];
const extra: Pod[] = [];
/** The pay app on PostgreSQL: each charge writes a `charges` row, in transactional mode. */
const env = () => ({ DATABASE_URL: pgs.url, LOCK_TTL: String(LOCK_TTL) });

beforeAll(async () => {
  pgs = await isolatedSchema('pods', 4);
  await pgs.pool.query(
    'create table charges (id serial primary key, idem_key text not null, amount int not null, pod text not null)',
  );
  pods = await Promise.all([startPod('a', env()), startPod('b', env())]);
}, 60_000);
afterAll(async () => {
  await Promise.all([...pods, ...extra].map((p) => p.kill('SIGKILL')));
  await pgs?.drop();
});

async function rowsFor(key: string): Promise<number> {
  const { rows } = await pgs.pool.query<{ n: number }>('select count(*)::int as n from charges where idem_key = $1', [
    key,
  ]);
  return rows[0]!.n;
}

/** Pays with `key` until answered 200: 409 while a claim given back late (or expiring) holds the key. */
async function payUntilAnswered(key: string) {
  let answer: Awaited<ReturnType<typeof pay>> | undefined;
  await expect
    .poll(async () => (answer = await pay(pods[0]!.url, key, { amount: 100 })).status, {
      timeout: LOCK_TTL + 5_000,
      interval: 100,
    })
    .toBe(200);
  return answer!;
}

describe('two processes sharing PostgreSQL', () => {
  it('200 concurrent calls with one key over both processes: one execution, one business row, repeated over 5 keys', async () => {
    for (let round = 0; round < 5; round++) {
      const key = randomUUID();
      const results = await Promise.all(
        Array.from({ length: 200 }, (_, i) => pay(pods[i % 2]!.url, key, { amount: 100, holdMs: 50 })),
      );
      // 409: in flight. 503: the claim waited longer than storeTimeout for a pooled connection on a
      // busy machine, so it was not run (fail-closed). Neither runs the charge: one row at most, and
      // none when every claim of the burst timed out, the winner's too: the next call then runs it.
      expect(results.filter((r) => r.status !== 200 && r.status !== 409 && r.status !== 503)).toEqual([]);
      const ok = results.filter((r) => r.status === 200);
      expect(await rowsFor(key)).toBeLessThanOrEqual(1);
      if (ok.length === 0) ok.push(await payUntilAnswered(key));
      expect(await rowsFor(key)).toBe(1);
      expect(new Set(ok.map((r) => r.chargeId)).size).toBe(1);
    }
  });
});

describe('transactional mode, the holder killed with SIGKILL', () => {
  it.each([
    ['before the business write', 'before-write', false],
    ['after the business write, before the commit', 'after-write', false],
    ['after the commit, before the answer', 'after-commit', true],
  ] as const)('%s: the retry ends with exactly one business row', async (_label, point, committed) => {
    const victim = await startPod(`victim-${point}`, env());
    extra.push(victim);
    const key = randomUUID();
    const lost = pay(victim.url, key, { amount: 700, point });
    await victim.waitFor(new RegExp(`point ${point} ${key}`));
    await victim.kill('SIGKILL');
    expect((await lost).status).toBe(0); // the connection was lost
    expect(await rowsFor(key)).toBe(committed ? 1 : 0);

    if (!committed) {
      // an uncommitted claim blocks its key until it expires
      expect((await pay(pods[0]!.url, key, { amount: 700 })).status).toBe(409);
      await sleep(LOCK_TTL + 200); // real time: the claim expires in PostgreSQL's clock
    }
    const retry = await pay(pods[0]!.url, key, { amount: 700 });
    expect(retry).toMatchObject({ status: 200, replayed: committed });
    expect(await rowsFor(key)).toBe(1);
    // and every later retry, anywhere, replays that one charge
    const again = await pay(pods[1]!.url, key, { amount: 700 });
    expect([again.chargeId, again.replayed]).toEqual([retry.chargeId, true]);
    expect(await rowsFor(key)).toBe(1);
  });
});

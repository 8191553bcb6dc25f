/**
 * Pods in separate Node processes sharing PostgreSQL, in transactional mode:
 * concurrency across processes, and SIGKILL at each point of a charge.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Pod, startPod } from './helpers/pods.js';
import { isolatedSchema, type PgSchema } from './helpers/postgres.js';
import { sleep } from './helpers/redis.js';

const LOCK_TTL = 3_000; // storeTimeout is then 1 s (lockTtl / 3): 200 concurrent calls on a busy machine fit in it
let pgs: PgSchema;
let pods: Pod[] = [];
const extra: Pod[] = [];

beforeAll(async () => {
  pgs = await isolatedSchema('pods', 4);
  await pgs.pool.query('create table charges (id serial primary key, idem_key text not null, amount int not null, pod text not null)');
  const env = { DATABASE_URL: pgs.url, LOCK_TTL: String(LOCK_TTL) };
  pods = await Promise.all([startPod('a', env, 'pg-pod'), startPod('b', env, 'pg-pod')]);
}, 60_000);
afterAll(async () => {
  await Promise.all([...pods, ...extra].map((p) => p.kill('SIGKILL')));
  await pgs?.drop();
});

async function charge(pod: Pod, key: string, input: { amount: number; holdMs?: number; point?: string }) {
  const response = await fetch(`${pod.url}/charge`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(input),
  });
  const body = (await response.json()) as { result?: { data: { chargeId: number } } };
  return { status: response.status, chargeId: body.result?.data.chargeId, replayed: response.headers.get("idempotent-replayed"), error: (body as { error?: { message: string } }).error?.message };
}

async function rowsFor(key: string): Promise<number> {
  const { rows } = await pgs.pool.query<{ n: number }>('select count(*)::int as n from charges where idem_key = $1', [key]);
  return rows[0]!.n;
}

describe('two processes sharing PostgreSQL', () => {
  it('200 concurrent calls with one key over both processes: one execution, one business row, repeated over 5 keys', async () => {
    for (let round = 0; round < 5; round++) {
      const key = randomUUID();
      const results = await Promise.all(Array.from({ length: 200 }, (_, i) => charge(pods[i % 2]!, key, { amount: 100, holdMs: 50 })));
      expect(await rowsFor(key)).toBe(1);
      const ok = results.filter((r) => r.status === 200);
      expect(ok.length).toBeGreaterThanOrEqual(1);
      expect(results.filter((r) => r.status !== 200 && r.status !== 409)).toEqual([]);
      expect(new Set(ok.map((r) => r.chargeId)).size).toBe(1);
    }
  });
});

describe('transactional mode, the holder killed with SIGKILL', () => {
  it.each([
    ['before the business write', 'before-write', false],
    ['after the business write, before the commit', 'after-write', false],
    ['after the commit, before the answer', 'after-commit', true],
  ])('%s: the retry ends with exactly one business row', async (_label, point, committed) => {
    const victim = await startPod(`victim-${point}`, { DATABASE_URL: pgs.url, LOCK_TTL: String(LOCK_TTL) }, 'pg-pod');
    extra.push(victim);
    const key = randomUUID();
    const lost = charge(victim, key, { amount: 700, point }).catch(() => 'connection lost');
    await victim.waitFor(new RegExp(`point ${point} ${key}`));
    await victim.kill('SIGKILL');
    expect(await lost).toBe('connection lost');
    expect(await rowsFor(key)).toBe(committed ? 1 : 0);

    const retryAt = committed ? 0 : LOCK_TTL + 200; // an uncommitted claim blocks its key until it expires
    if (!committed) expect((await charge(pods[0]!, key, { amount: 700 })).status).toBe(409);
    await sleep(retryAt);
    const retry = await charge(pods[0]!, key, { amount: 700 });
    expect(retry.status).toBe(200);
    expect(retry.replayed).toBe(committed ? 'true' : null);
    expect(await rowsFor(key)).toBe(1);
    // and every later retry, anywhere, replays that one charge
    const again = await charge(pods[1]!, key, { amount: 700 });
    expect([again.chargeId, again.replayed]).toEqual([retry.chargeId, 'true']);
    expect(await rowsFor(key)).toBe(1);
  });
});

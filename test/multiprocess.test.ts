/**
 * Two pods in two Node processes sharing Redis, as behind a load balancer.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Pod, startPod } from './helpers/pods.js';
import { connectRedis, deleteByPrefix, sleep, uniquePrefix } from './helpers/redis.js';

const redis = connectRedis();
const prefix = uniquePrefix('pods');
const LOCK_TTL = 3_000; // storeTimeout is then 1 s (lockTtl / 3): 200 concurrent calls on a busy machine fit in it
let pods: Pod[] = [];

beforeAll(async () => {
  pods = await Promise.all([startPod('a', { PREFIX: prefix, LOCK_TTL: String(LOCK_TTL) }), startPod('b', { PREFIX: prefix, LOCK_TTL: String(LOCK_TTL) })]);
});
afterAll(async () => {
  await Promise.all(pods.map((p) => p.kill('SIGKILL')));
  await deleteByPrefix(redis, prefix);
  redis.disconnect();
});

/** One raw tRPC mutation over HTTP: the status, the body and the replay header. */
async function charge(pod: Pod, key: string, input: { amount: number; holdMs?: number }) {
  const response = await fetch(`${pod.url}/charge`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(input),
  });
  const body = (await response.json()) as { result?: { data: { chargeId: string } }; error?: { data: { httpStatus: number } } };
  return { status: response.status, chargeId: body.result?.data.chargeId, replayed: response.headers.get('idempotent-replayed') };
}

describe('two processes sharing Redis', () => {
  it('200 concurrent calls with one key, over both processes: exactly one execution, repeated over 10 keys', async () => {
    for (let round = 0; round < 10; round++) {
      const key = randomUUID();
      const results = await Promise.all(
        Array.from({ length: 200 }, (_, i) => charge(pods[i % 2]!, key, { amount: 100, holdMs: 50 })),
      );
      expect(await redis.get(`${prefix}executions:${key}`)).toBe('1');
      const ok = results.filter((r) => r.status === 200);
      const conflicts = results.filter((r) => r.status === 409);
      expect(ok.length + conflicts.length).toBe(200);
      expect(ok.length).toBeGreaterThanOrEqual(1);
      expect(new Set(ok.map((r) => r.chargeId)).size).toBe(1);
      // after the dust settles, both pods replay the one outcome
      const [fromA, fromB] = await Promise.all([charge(pods[0]!, key, { amount: 100, holdMs: 50 }), charge(pods[1]!, key, { amount: 100, holdMs: 50 })]);
      expect([fromA.chargeId, fromB.chargeId]).toEqual([ok[0]!.chargeId, ok[0]!.chargeId]);
      expect([fromA.replayed, fromB.replayed]).toEqual(['true', 'true']);
    }
  });

  it('a pod killed with SIGKILL mid-charge: the retry on the other pod gets 409, then runs once after lockTtl', async () => {
    const victim = await startPod('victim', { PREFIX: prefix, LOCK_TTL: String(LOCK_TTL) });
    const key = randomUUID();
    const inFlight = charge(victim, key, { amount: 700, holdMs: 60_000 }).catch(() => 'connection lost');
    await expect.poll(() => redis.lrange(`${prefix}started`, 0, -1), { timeout: 5_000 }).toContain(`victim:${key}`);
    await victim.kill('SIGKILL');
    expect(await inFlight).toBe('connection lost');

    const early = await charge(pods[1]!, key, { amount: 700, holdMs: 60_000 });
    expect(early.status).toBe(409);
    await sleep(LOCK_TTL + 200);
    const retry = await charge(pods[1]!, key, { amount: 700, holdMs: 10 });
    expect(retry.status).toBe(200);
    expect(retry.chargeId).toBe(`b-${key}-2`);
    expect(await redis.get(`${prefix}executions:${key}`)).toBe('2');
    // and from then on, it replays on every pod
    expect((await charge(pods[0]!, key, { amount: 700, holdMs: 10 })).chargeId).toBe(retry.chargeId);
  });
});

/**
 * Two pods in two Node processes sharing Redis, as behind a load balancer.
 * Each pod logs its executions in a list of that Redis, so they add up.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pay } from '../fixtures/pay-app.js';
import { type Pod, startPod } from '../helpers/pods.js';
import { connectRedis, deleteByPrefix, REDIS_URL, sleep, uniquePrefix } from '../helpers/redis.js';

const redis = connectRedis();
const prefix = uniquePrefix('pods');
const LOCK_TTL = 3_000; // storeTimeout is then 1 s (lockTtl / 3): 200 concurrent calls on a busy machine fit in it
const env = { PREFIX: prefix, LOCK_TTL: String(LOCK_TTL), LOG_URL: REDIS_URL, LOG_KEY: `${prefix}log` };
let pods: Pod[] = [];

beforeAll(async () => {
  pods = await Promise.all([startPod('a', env), startPod('b', env)]);
});
afterAll(async () => {
  await Promise.all(pods.map((p) => p.kill('SIGKILL')));
  await deleteByPrefix(redis, prefix);
  redis.disconnect();
});

/** The pods that ran `key`, in order. */
async function runsOf(key: string): Promise<string[]> {
  const lines = await redis.lrange(env.LOG_KEY, 0, -1);
  return lines
    .map((line) => line.split(' '))
    .filter(([kind, , k]) => kind === 'run' && k === key)
    .map(([, pod]) => pod!);
}

describe('two processes sharing Redis', () => {
  it('200 concurrent calls with one key, over both processes: exactly one execution, repeated over 10 keys', async () => {
    for (let round = 0; round < 10; round++) {
      const key = randomUUID();
      const results = await Promise.all(
        Array.from({ length: 200 }, (_, i) => pay(pods[i % 2]!.url, key, { amount: 100, holdMs: 50 })),
      );
      expect(await runsOf(key)).toHaveLength(1);
      const ok = results.filter((r) => r.status === 200);
      const conflicts = results.filter((r) => r.status === 409);
      expect(ok.length + conflicts.length).toBe(200);
      expect(ok.length).toBeGreaterThanOrEqual(1);
      expect(new Set(ok.map((r) => r.chargeId)).size).toBe(1);
      // after the dust settles, both pods replay the one outcome
      const [fromA, fromB] = await Promise.all([
        pay(pods[0]!.url, key, { amount: 100, holdMs: 50 }),
        pay(pods[1]!.url, key, { amount: 100, holdMs: 50 }),
      ]);
      expect([fromA.chargeId, fromB.chargeId]).toEqual([ok[0]!.chargeId, ok[0]!.chargeId]);
      expect([fromA.replayed, fromB.replayed]).toEqual([true, true]);
    }
  });

  it('a pod killed with SIGKILL mid-charge: the retry on the other pod gets 409, then runs once after lockTtl', async () => {
    const victim = await startPod('victim', env);
    const key = randomUUID();
    const inFlight = pay(victim.url, key, { amount: 700, holdMs: 60_000 });
    await expect.poll(() => runsOf(key), { timeout: 5_000 }).toEqual(['victim']);
    await victim.kill('SIGKILL');
    expect((await inFlight).status).toBe(0); // the connection was lost

    const early = await pay(pods[1]!.url, key, { amount: 700, holdMs: 60_000 });
    expect(early.status).toBe(409);
    await sleep(LOCK_TTL + 200); // real time: the dead pod's claim expires in Redis's clock
    const retry = await pay(pods[1]!.url, key, { amount: 700, holdMs: 10 });
    expect(retry).toMatchObject({ status: 200, replayed: false });
    expect(await runsOf(key)).toEqual(['victim', 'b']);
    // and from then on, it replays on every pod
    expect(await pay(pods[0]!.url, key, { amount: 700, holdMs: 10 })).toMatchObject({
      replayed: true,
      chargeId: retry.chargeId,
    });
  });
});

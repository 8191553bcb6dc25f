/**
 * Redis killed between a claim and its completion, with the client retrying
 * during the outage, on the holder's own instance and on another one: the
 * retries are refused (503) and their claims, queued by ioredis, reach Redis
 * after their callers gave up. They must never take the key, and the holder's
 * completion, queued too, must still land. Repeated, on a Redis with
 * persistence and on one that restarts empty; executions are counted per key.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type PayApp, pay, retryUntilAnswered, startPayApp } from '../fixtures/pay-app.js';
import { type ControlledRedis, startControlledRedis } from '../helpers/redis-process.js';
import { gate } from '../helpers/trpc.js';

const LOCK_TTL = 5_000;
const STORE_TIMEOUT = 500;
const TRIALS = 4;
/** A busy machine can be slow to restart a server and reconnect: bounds are generous, never speed claims. */
const SLACK = 6_000;

describe.each([
  ['with persistence (appendfsync always)', true, 'ioredis'],
  ['restarted empty (no persistence)', false, 'ioredis'],
  ['with persistence (appendfsync always)', true, 'node-redis'],
  ['restarted empty (no persistence)', false, 'node-redis'],
] as const)('Redis %s, killed between the claim and the completion, %s client', (_label, persist, library) => {
  let redis: ControlledRedis;
  let a: PayApp;
  let b: PayApp;
  const executionsPerKey: Record<string, number[]> = { same: [], other: [] };
  const appOn = (port: number) =>
    startPayApp({
      store: { redis: `redis://127.0.0.1:${port}`, prefix: 'restart:', library },
      lockTtl: LOCK_TTL,
      storeTimeout: STORE_TIMEOUT,
      warmUp: true,
    });

  beforeAll(async () => {
    redis = await startControlledRedis({ persist });
    [a, b] = await Promise.all([appOn(redis.port), appOn(redis.port)]);
  });
  afterAll(async () => {
    console.log(
      `[redis ${persist ? 'persistent' : 'empty'} restart, ${library}] executions per key: ${JSON.stringify(executionsPerKey)}`,
    );
    await Promise.all([a?.close(), b?.close()]);
    await redis?.destroy();
  });

  it.each([
    ['on the holder instance', 'same'],
    ['on another instance', 'other'],
  ] as const)(
    `retries during the outage %s are refused and run nothing; the retry after it replays: 1 execution per key, ${TRIALS} times`,
    async (_where, where) => {
      for (let trial = 0; trial < TRIALS; trial++) {
        const retrying = where === 'same' ? a : b;
        const key = randomUUID();
        const charging = gate();
        a.hold(charging.opened);
        const first = pay(a.url, key, { amount: 200 });
        await expect.poll(() => a.runs(key)).toBe(1);
        a.hold(undefined);

        await redis.kill();
        // the client retries while Redis is down: refused, and nothing runs
        for (let i = 0; i < 2; i++)
          expect(await pay(retrying.url, key, { amount: 200 })).toMatchObject({
            status: 503,
            reason: 'store_unavailable',
          });
        charging.open();
        const answer = await first;
        expect(answer).toMatchObject({ status: 200, replayed: false }); // it ran: its caller gets the result
        const completedBefore = a.events.filter((e) => e.result === 'completed' && e.name === 'pay').length;
        await redis.start();
        if (!persist) {
          // An empty Redis forgot the claim: until the holder's queued completion lands, a claim that
          // did not give up would find the key free. Wait for it, as the README says.
          await expect
            .poll(() => a.events.filter((e) => e.result === 'completed' && e.name === 'pay').length, { timeout: SLACK })
            .toBeGreaterThan(completedBefore);
        }
        const retried = await retryUntilAnswered(() => pay(retrying.url, key, { amount: 200 }), LOCK_TTL + SLACK);
        expect(retried).toMatchObject({ status: 200, replayed: true, chargeId: answer.chargeId });
        const runs = a.runs(key) + b.runs(key);
        executionsPerKey[where]!.push(runs);
        expect(runs).toBe(1);
      }
      expect(a.events.filter((e) => e.result === 'lease_lost')).toEqual([]);
      expect(a.events.filter((e) => e.result === 'store_error' && e.reason === 'gave_up')).toEqual([]);
    },
  );
});

describe('a completion queued through an outage longer than its retries', () => {
  let redis: ControlledRedis;
  beforeAll(async () => {
    redis = await startControlledRedis({ persist: false });
  });
  afterAll(async () => {
    await redis?.destroy();
  });

  it('is reported as given up within 2 × lockTtl, then as stored when it lands after Redis is back', async () => {
    const lockTtl = 1_000;
    const storeTimeout = 300;
    const app = await startPayApp({
      store: { redis: redis.url, prefix: 'queued:' },
      lockTtl,
      storeTimeout,
      warmUp: true,
    });
    try {
      const key = randomUUID();
      const charging = gate();
      app.hold(charging.opened);
      const first = pay(app.url, key, { amount: 300 });
      await expect.poll(() => app.runs(key)).toBe(1);
      app.hold(undefined);
      await redis.kill();
      charging.open();
      const answer = await first;
      expect(answer).toMatchObject({ status: 200, replayed: false });
      // The completion failed (timed out) and is retried for lockTtl; then the attempts ioredis keeps
      // queued are waited for up to one more lockTtl: gave_up comes while Redis is still down.
      await expect
        .poll(() => app.events.some((e) => e.reason === 'gave_up'), { timeout: storeTimeout + 2 * lockTtl + SLACK })
        .toBe(true);
      await redis.start();
      await expect
        .poll(() => app.events.some((e) => e.result === 'completed' && e.reason === 'completed_late'), {
          timeout: SLACK,
        })
        .toBe(true);
      const ends = app.events.filter((e) => e.reason === 'gave_up' || e.reason === 'completed_late');
      expect(ends.map((e) => e.reason)).toEqual(['gave_up', 'completed_late']);
      expect(await pay(app.url, key, { amount: 300 })).toMatchObject({
        status: 200,
        replayed: true,
        chargeId: answer.chargeId,
      });
      expect(app.runs(key)).toBe(1);
    } finally {
      await app.close();
    }
  });
});

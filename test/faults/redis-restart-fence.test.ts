/**
 * A Redis without persistence that restarts empty while a payment runs, with
 * the store's restart fence on (`restartFence`, markers written once by
 * `initialize()`): the retry, on the holder's instance or another one, never
 * runs the payment again.
 *
 * - The holder still runs when Redis comes back: the retry is refused (503 by
 *   the fence, then 409 once the holder's queued renewal has recreated its
 *   claim), and replays once the holder's completion lands.
 * - Redis is still down when the holder answers: its completion waits in
 *   ioredis's queue; the retry, sent the moment Redis is back (not waiting for
 *   that completion), is refused until it lands, then replays.
 *
 * And the same restart without the fence, once: the retry takes the key Redis
 * forgot and runs the payment a second time (what the fence is for).
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisStore } from '../../src/redis.js';
import { type PayApp, pay, retryUntilAnswered, startPayApp } from '../fixtures/pay-app.js';
import { type ControlledRedis, startControlledRedis } from '../helpers/redis-process.js';
import { gate } from '../helpers/trpc.js';

const LOCK_TTL = 1_500;
const STORE_TIMEOUT = 400;
const TRIALS = 10;
/** A busy machine can be slow to restart a server and reconnect: bounds are generous, never speed claims. */
const SLACK = 8_000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let redis: ControlledRedis;
beforeAll(async () => {
  redis = await startControlledRedis({ persist: false });
});
afterAll(async () => {
  await redis?.destroy();
});

describe('Redis restarted empty, with the restart fence', () => {
  let a: PayApp;
  let b: PayApp;
  const executionsPerKey: Record<string, number[]> = {};
  const count = (label: string, runs: number) => (executionsPerKey[label] ??= []).push(runs);

  beforeAll(async () => {
    const admin = new Redis(redis.url);
    await redisStore({ client: admin, prefix: 'fenced:', restartFence: true }).initialize();
    admin.disconnect();
    const appOn = (name: string) =>
      startPayApp({
        name,
        store: { redis: redis.url, prefix: 'fenced:', restartFence: true },
        lockTtl: LOCK_TTL,
        storeTimeout: STORE_TIMEOUT,
        warmUp: true,
      });
    [a, b] = await Promise.all([appOn('a'), appOn('b')]);
  });
  afterAll(async () => {
    console.log(`[redis empty restart, fenced] executions per key: ${JSON.stringify(executionsPerKey)}`);
    await Promise.all([a?.close(), b?.close()]);
  });

  /** Each restart raises the fence for a lockTtl: a trial starts once a fresh key runs again. */
  async function fenceDown() {
    await retryUntilAnswered(() => pay(a.url, randomUUID(), { amount: 1 }), LOCK_TTL + SLACK);
  }

  /** One key whose retry goes to the holder's instance, one whose retry goes to the other, run together. */
  const keys = () => ({ same: randomUUID(), other: randomUUID() });
  const retrierOf = (where: 'same' | 'other') => (where === 'same' ? a : b);
  const WHERE = ['same', 'other'] as const;

  it(`the holder still runs when Redis is back: the retry, on the holder's instance and on another, is refused until the holder's outcome lands, then replays; 1 execution per key, ${TRIALS} times`, async () => {
    for (let trial = 0; trial < TRIALS; trial++) {
      await fenceDown();
      const key = keys();
      const charging = gate();
      a.hold(charging.opened);
      const first = WHERE.map((where) => pay(a.url, key[where], { amount: 200 }));
      await expect.poll(() => a.runs(key.same) + a.runs(key.other)).toBe(2);
      a.hold(undefined);

      await redis.kill();
      await redis.start(); // empty, within lockTtl
      for (const where of WHERE) {
        // refused while the holder runs: by the fence (503), then by the claim its renewal recreated (409)
        const early = await retryUntilAnswered(async () => {
          const result = await pay(retrierOf(where).url, key[where], { amount: 200 });
          expect([503, 409]).toContain(result.status);
          return result.status === 409 ? { ...result, status: 200 } : result;
        }, SLACK);
        expect(early.refusals.every((status) => status === 503)).toBe(true);
      }
      // past a renewal: the holder's claims stand (its renewal recreated them, and renews them)
      await sleep(LOCK_TTL / 2);
      for (const where of WHERE)
        expect(await pay(retrierOf(where).url, key[where], { amount: 200 })).toMatchObject({ status: 409 });

      charging.open();
      const answers = await Promise.all(first);
      for (const [i, where] of WHERE.entries()) {
        expect(answers[i]).toMatchObject({ status: 200, replayed: false });
        const retried = await retryUntilAnswered(() => pay(retrierOf(where).url, key[where], { amount: 200 }), SLACK);
        expect(retried).toMatchObject({ status: 200, replayed: true, chargeId: answers[i]!.chargeId });
        const runs = a.runs(key[where]) + b.runs(key[where]);
        count(`running, ${where}`, runs);
        expect(runs).toBe(1);
      }
    }
    expect(a.events.filter((e) => e.result === 'lease_lost')).toEqual([]);
    expect(a.events.filter((e) => e.result === 'store_error' && e.reason === 'gave_up')).toEqual([]);
  });

  it(`the holder answered while Redis was down: the retry, on the holder's instance and on another, sent as Redis is back, is refused until the queued completion lands, then replays; 1 execution per key, ${TRIALS} times`, async () => {
    for (let trial = 0; trial < TRIALS; trial++) {
      await fenceDown();
      const key = keys();
      const charging = gate();
      a.hold(charging.opened);
      const first = WHERE.map((where) => pay(a.url, key[where], { amount: 300 }));
      await expect.poll(() => a.runs(key.same) + a.runs(key.other)).toBe(2);
      a.hold(undefined);

      await redis.kill();
      charging.open();
      const answers = await Promise.all(first);
      // they ran: their callers have the results; the completions wait in ioredis's queue
      for (const answer of answers) expect(answer).toMatchObject({ status: 200, replayed: false });
      await redis.start();
      const retried = await Promise.all(
        WHERE.map((where) =>
          retryUntilAnswered(() => pay(retrierOf(where).url, key[where], { amount: 300 }), LOCK_TTL + SLACK),
        ),
      );
      for (const [i, where] of WHERE.entries()) {
        expect(retried[i]).toMatchObject({ status: 200, replayed: true, chargeId: answers[i]!.chargeId });
        const runs = a.runs(key[where]) + b.runs(key[where]);
        count(`answered, ${where}`, runs);
        expect(runs).toBe(1);
      }
    }
    expect(a.events.filter((e) => e.result === 'store_error' && e.reason === 'gave_up')).toEqual([]);
  });
});

describe('Redis restarted empty, without the fence', () => {
  it('the retry on another instance takes the key Redis forgot while the holder runs: the payment runs twice', async () => {
    const appOn = (name: string) =>
      startPayApp({
        name,
        store: { redis: redis.url, prefix: 'open:' },
        lockTtl: LOCK_TTL,
        storeTimeout: STORE_TIMEOUT,
        warmUp: true,
      });
    const [a, b] = await Promise.all([appOn('a'), appOn('b')]);
    try {
      const key = randomUUID();
      const charging = gate();
      a.hold(charging.opened);
      const first = pay(a.url, key, { amount: 400 });
      await expect.poll(() => a.runs(key)).toBe(1);
      a.hold(undefined);
      await redis.kill();
      await redis.start();
      const retried = await retryUntilAnswered(() => pay(b.url, key, { amount: 400 }), SLACK);
      charging.open();
      expect(await first).toMatchObject({ status: 200, replayed: false });
      expect(retried).toMatchObject({ status: 200, replayed: false });
      expect(a.runs(key) + b.runs(key)).toBe(2);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});

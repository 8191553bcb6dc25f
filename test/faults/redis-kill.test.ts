/**
 * Redis killed (SIGKILL) at each point of a request, on a redis-server this
 * file starts for itself, through an app with a default ioredis client
 * (offline queue on, reconnecting, unfulfilled commands re-sent) and one with
 * a default node-redis client (offline queue on, reconnecting, unfulfilled
 * commands failed).
 *
 * With persistence (`appendfsync always`), a crash loses nothing Redis
 * acknowledged. Without it, a restart comes back empty: the last describe
 * shows what that costs.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { COMPLETE } from '../../src/stores/redis/scripts.js';
import { type PayApp, pay, retryUntilAnswered, startPayApp } from '../fixtures/pay-app.js';
import { type ControlledRedis, startControlledRedis } from '../helpers/redis-process.js';
import { startTriggerProxy, type TriggerMode, type TriggerProxy } from '../helpers/trigger-proxy.js';
import { gate } from '../helpers/trpc.js';

const LOCK_TTL = 5_000;
const STORE_TIMEOUT = 500;
/** A busy machine can be slow to restart a server and reconnect: bounds are generous, never speed claims. */
const SLACK = 4_000;

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** An app on `port` with a default client of `library`, its scripts loaded (so the crash also empties a warm script cache). */
async function appOn(port: number, library: 'ioredis' | 'node-redis' = 'ioredis'): Promise<PayApp> {
  const app = await startPayApp({
    store: { redis: `redis://127.0.0.1:${port}`, prefix: 'kill:', library },
    lockTtl: LOCK_TTL,
    storeTimeout: STORE_TIMEOUT,
    warmUp: true,
  });
  cleanups.push(() => app.close());
  return app;
}

describe.each(['ioredis', 'node-redis'] as const)(
  'Redis killed at each point of a request (persistent Redis), %s client',
  (library) => {
    let redis: ControlledRedis;
    beforeAll(async () => {
      redis = await startControlledRedis({ persist: true });
    });
    afterAll(async () => {
      await redis?.destroy();
    });
    afterEach(async () => {
      if (redis.process === undefined) await redis.start();
    });

    it('before the claim: 503 within the store timeout, nothing runs, and the key runs once as soon as Redis is back', async () => {
      const app = await appOn(redis.port, library);
      await redis.kill();
      const key = randomUUID();
      const refused = await pay(app.url, key, { amount: 100 });
      expect(refused).toMatchObject({ status: 503, reason: 'store_unavailable' });
      expect(refused.message).toMatch(/Retry later with the same key/);
      expect(refused.tookMs).toBeLessThan(STORE_TIMEOUT + SLACK);
      expect(app.runs(key)).toBe(0);

      await redis.start();
      // A claim the client queued lands late and is given back by the engine; the retry runs.
      const retried = await retryUntilAnswered(() => pay(app.url, key, { amount: 100 }), LOCK_TTL + SLACK);
      expect(retried).toMatchObject({ status: 200, replayed: false });
      expect(retried.waitedMs).toBeLessThan(LOCK_TTL + SLACK);
      expect(app.runs(key)).toBe(1);
      expect(await pay(app.url, key, { amount: 100 })).toMatchObject({
        status: 200,
        replayed: true,
        chargeId: retried.chargeId,
      });
      expect(app.runs(key)).toBe(1);
    });

    it('between the claim and the completion: the client gets its result, the completion lands when Redis is back, the retry replays', async () => {
      const app = await appOn(redis.port, library);
      const key = randomUUID();
      const running = gate();
      app.hold(running.opened);
      const first = pay(app.url, key, { amount: 200 });
      await expect.poll(() => app.runs(key)).toBe(1);
      app.hold(undefined);

      await redis.kill();
      // a client retrying while Redis is down is refused, it does not run a second time
      expect(await pay(app.url, key, { amount: 200 })).toMatchObject({ status: 503, reason: 'store_unavailable' });
      running.open();
      const answer = await first;
      // The operation ran: its caller gets the result rather than an error that would make it retry.
      expect(answer).toMatchObject({ status: 200, replayed: false });
      expect(app.events).toContainEqual(expect.objectContaining({ result: 'store_error', operation: 'complete' }));

      await redis.start();
      const retried = await retryUntilAnswered(() => pay(app.url, key, { amount: 200 }), LOCK_TTL + SLACK);
      expect(retried).toMatchObject({ status: 200, replayed: true, chargeId: answer.chargeId });
      expect(app.runs(key)).toBe(1);
    });

    describe('during the completion', () => {
      let proxy: TriggerProxy;
      beforeAll(async () => {
        proxy = await startTriggerProxy(redis.port);
      });
      afterAll(async () => {
        await proxy?.close();
      });

      it.each<[string, TriggerMode]>([
        ['before Redis receives the completion', 'before-forward'],
        ['after Redis applied the completion, before its answer arrives', 'after-reply'],
      ])('killed %s: the client gets its result and the retry replays it; one execution', async (_label, mode) => {
        const app = await appOn(proxy.port, library);
        const key = randomUUID();
        const killed = proxy.arm(COMPLETE.sha, mode, () => redis.kill());
        const answer = await pay(app.url, key, { amount: 300 });
        await killed;
        expect(answer).toMatchObject({ status: 200, replayed: false });
        expect(app.runs(key)).toBe(1);
        // the fault hit the completion: it did not get an answer in time
        expect(app.events).toContainEqual(expect.objectContaining({ result: 'store_error', operation: 'complete' }));

        await redis.start();
        // ioredis re-sends the completion it never got an answer for; node-redis fails it and the engine
        // tries it again: it is stored (or already was)
        const retried = await retryUntilAnswered(() => pay(app.url, key, { amount: 300 }), LOCK_TTL + SLACK);
        expect(retried).toMatchObject({ status: 200, replayed: true, chargeId: answer.chargeId });
        expect(retried.waitedMs).toBeLessThan(LOCK_TTL + SLACK);
        expect(app.runs(key)).toBe(1);
      });
    });
  },
);

/**
 * Without persistence a restarted Redis is empty. This is what it means,
 * shown rather than hidden: outcomes stored before the crash are gone, so a
 * retry runs again; claims are gone too, so a duplicate of a request that is
 * still running runs beside it. The fence keeps the store consistent (one
 * outcome per key, the newer holder's), but the operation ran twice.
 */
describe('Redis restarted empty (no persistence)', () => {
  let redis: ControlledRedis;
  beforeAll(async () => {
    redis = await startControlledRedis({ persist: false });
  });
  afterAll(async () => {
    await redis?.destroy();
  });

  it('stored outcomes are lost: a retry after the restart runs the operation again', async () => {
    const app = await appOn(redis.port);
    const key = randomUUID();
    const first = await pay(app.url, key, { amount: 400 });
    expect(first).toMatchObject({ status: 200, replayed: false });
    expect(await pay(app.url, key, { amount: 400 })).toMatchObject({ replayed: true, chargeId: first.chargeId });

    await redis.kill();
    await redis.start();
    const after = await retryUntilAnswered(() => pay(app.url, key, { amount: 400 }), LOCK_TTL + SLACK);
    expect(after).toMatchObject({ status: 200, replayed: false });
    expect(after.chargeId).not.toBe(first.chargeId);
    expect(app.runs(key)).toBe(2);
  });

  it('claims are lost: a duplicate runs beside the running request; the fence keeps one outcome, the newer one', async () => {
    const app = await appOn(redis.port);
    const key = randomUUID();
    const running = gate();
    app.hold(running.opened);
    const first = pay(app.url, key, { amount: 500 });
    await expect.poll(() => app.runs(key)).toBe(1);
    app.hold(undefined);
    expect(await pay(app.url, key, { amount: 500 })).toMatchObject({ status: 409, reason: 'in_progress' });

    await redis.kill();
    await redis.start();
    const duplicate = await retryUntilAnswered(() => pay(app.url, key, { amount: 500 }), LOCK_TTL + SLACK);
    expect(duplicate).toMatchObject({ status: 200, replayed: false });
    expect(app.runs(key)).toBe(2);

    running.open();
    const original = await first;
    expect(original.status).toBe(200);
    expect(original.chargeId).not.toBe(duplicate.chargeId);
    // the first holder's completion finds another outcome there and is refused
    expect(app.events).toContainEqual(expect.objectContaining({ result: 'lease_lost', reason: 'fenced' }));
    expect(await pay(app.url, key, { amount: 500 })).toMatchObject({
      status: 200,
      replayed: true,
      chargeId: duplicate.chargeId,
    });
  });
});

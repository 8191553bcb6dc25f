/**
 * Redis hung (SIGSTOP): connections stay open and nothing answers, the
 * failure a timeout must catch, since no error ever arrives. On a
 * redis-server of this file's own, with a default ioredis client and a
 * default node-redis client.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type PayApp, pay, retryUntilAnswered, startPayApp } from '../fixtures/pay-app.js';
import { type ControlledRedis, startControlledRedis } from '../helpers/redis-process.js';
import { gate, sleep } from '../helpers/trpc.js';

const LOCK_TTL = 3_000;
const STORE_TIMEOUT = 500;
const SLACK = 4_000;

let redis: ControlledRedis;
beforeAll(async () => {
  redis = await startControlledRedis({ persist: false });
});
afterAll(async () => {
  await redis?.destroy();
});
afterEach(() => {
  redis.resume(); // never leave it stopped, whatever failed
});

describe.each(['ioredis', 'node-redis'] as const)('Redis hung (SIGSTOP), %s client', (library) => {
  let app: PayApp;
  beforeAll(async () => {
    app = await startPayApp({
      store: { redis: redis.url, prefix: `hang-${library}:`, library },
      lockTtl: LOCK_TTL,
      storeTimeout: STORE_TIMEOUT,
    });
  });
  afterAll(async () => {
    await app?.close();
  });

  it('fails closed with 503 within the store timeout, stays healthy, and serves again by itself after SIGCONT', async () => {
    const done = randomUUID();
    const stored = await pay(app.url, done, { amount: 10 });
    expect(stored.status).toBe(200);

    redis.pause();
    const hungKeys: string[] = [];
    let slowest = 0;
    for (let round = 0; round < 3; round++) {
      const keys = Array.from({ length: 20 }, () => randomUUID());
      hungKeys.push(...keys);
      const answers = await Promise.all([
        ...keys.map((key) => pay(app.url, key, { amount: 20 })),
        pay(app.url, done, { amount: 10 }),
      ]);
      for (const answer of answers) {
        expect(answer).toMatchObject({ status: 503, reason: 'store_unavailable' });
        // a behavioural bound (the configured timeout plus slack), not a speed claim
        expect(answer.tookMs).toBeLessThan(STORE_TIMEOUT + SLACK);
        slowest = Math.max(slowest, answer.tookMs);
      }
      // the process is healthy: what does not need the store still answers
      const health = await fetch(`${app.url}/health`);
      expect(health.status).toBe(200);
      await sleep(STORE_TIMEOUT);
    }
    expect(hungKeys.filter((key) => app.runs(key) > 0)).toEqual([]);
    expect(app.events.filter((e) => e.result === 'store_error').length).toBeGreaterThanOrEqual(63);

    redis.resume();
    // no restart of anything: the next request succeeds on its own
    await expect
      .poll(async () => (await pay(app.url, randomUUID(), { amount: 30 })).status, { timeout: SLACK, interval: 100 })
      .toBe(200);
    // every key refused during the hang runs once now (the claims that landed late were given back)
    for (const key of hungKeys) {
      const retried = await retryUntilAnswered(() => pay(app.url, key, { amount: 20 }), LOCK_TTL + SLACK);
      expect(retried).toMatchObject({ status: 200, replayed: false });
      expect(app.runs(key)).toBe(1);
    }
    expect(await pay(app.url, done, { amount: 10 })).toMatchObject({
      status: 200,
      replayed: true,
      chargeId: stored.chargeId,
    });
    console.info(
      `[redis hung] ${hungKeys.length + 3} requests refused with 503 during the hang, slowest answer ${Math.round(slowest)} ms (storeTimeout ${STORE_TIMEOUT} ms); all ${hungKeys.length} keys ran once after SIGCONT`,
    );
  });

  it('a request running when Redis hangs: its client gets the result, and after SIGCONT the retry replays it', async () => {
    const key = randomUUID();
    const running = gate();
    app.hold(running.opened);
    const first = pay(app.url, key, { amount: 40 });
    await expect.poll(() => app.runs(key)).toBe(1);
    app.hold(undefined);

    redis.pause();
    running.open();
    const answer = await first;
    expect(answer).toMatchObject({ status: 200, replayed: false });
    expect(app.events).toContainEqual(expect.objectContaining({ result: 'store_error', operation: 'complete' }));
    redis.resume();

    // the completion was only late: it lands, and the retry replays it
    const retried = await retryUntilAnswered(() => pay(app.url, key, { amount: 40 }), LOCK_TTL + SLACK);
    expect(retried).toMatchObject({ status: 200, replayed: true, chargeId: answer.chargeId });
    expect(app.runs(key)).toBe(1);
  });
});

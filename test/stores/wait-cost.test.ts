/**
 * What `inFlight: 'wait'` costs the Redis store (issue 25, item 10: amplification).
 * Many duplicates of one key in flight must cost O(1) store writes per
 * record and a bounded number of scripts per waiter: the waiter flag `w` is
 * written once per claim, not on every poll, and polling is only a safety
 * net while the store notifies. Counted through INFO commandstats on a
 * private redis-server, so nothing else runs there; no timing assertions.
 * A waiter must still be served whether the holder completes, releases the
 * key (a 5xx-like error) or crashes (its claim expires unrenewed).
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIdempotencyEngine, type IdempotencyEngine } from '../../src/index.js';
import { type RedisStore, redisStore } from '../../src/redis.js';
import { sleep } from '../helpers/redis.js';
import { commandCalls, delta, type PrivateRedis, startPrivateRedis } from '../helpers/redis-server.js';
import { gate } from '../helpers/trpc.js';

/** Duplicates of one key, all in flight at once. */
const N = 300;
/** How long the duplicates wait before the holder settles (or crashes). */
const WAIT_MS = 1_500;
const RESULT = { chargeId: 'ch_1', amount: 500 };

let redisServer: PrivateRedis;
let admin: Redis;
const clients: Redis[] = [];
const stores: RedisStore[] = [];

beforeAll(async () => {
  redisServer = await startPrivateRedis();
  admin = new Redis({ port: redisServer.port });
});
afterAll(async () => {
  await Promise.all(stores.map((s) => s.close()));
  for (const c of clients) c.disconnect();
  admin?.disconnect();
  await redisServer?.stop();
});

function client(): Redis {
  const c = new Redis({ port: redisServer.port });
  clients.push(c);
  return c;
}

/** An engine on its own client and prefix, its scripts loaded (so the counts hold no EVAL after a NOSCRIPT). */
async function engineOn(c: Redis, prefix = `wc-${randomUUID().slice(0, 8)}:`, lockTtl?: number) {
  const store = redisStore({ client: c, prefix });
  stores.push(store);
  const engine = createIdempotencyEngine({ store, inFlight: 'wait', ...(lockTtl === undefined ? {} : { lockTtl }) });
  await engine.run({ key: `warm-up-${randomUUID()}`, name: 'pay', payload: {} }, async () => 'warm');
  return { engine, store };
}

const scripts = (calls: Record<string, number>) => (calls.evalsha ?? 0) + (calls.eval ?? 0);

/** Waits until the holder's claim is in Redis. */
async function claimed(store: RedisStore, key: string) {
  await expect.poll(() => admin.exists(store.keyOf(`:pay:${key}`)), { timeout: 5_000 }).toBe(1);
}

function duplicates(engine: IdempotencyEngine, key: string, onRun: () => void) {
  return Array.from({ length: N }, () =>
    engine.run({ key, name: 'pay', payload: { amount: 500 } }, async () => {
      onRun();
      return RESULT;
    }),
  );
}

/** A holder of a fresh key that settles with `settle` once let go, and N duplicates that wait WAIT_MS for it. */
async function holdAndWait(settle: () => unknown) {
  const { engine, store } = await engineOn(client());
  const key = randomUUID();
  const release = gate();
  let runs = 0;
  const before = await commandCalls(admin);
  const holder = engine.run({ key, name: 'pay', payload: { amount: 500 } }, async () => {
    runs++;
    await release.opened;
    return settle();
  });
  await claimed(store, key);
  const waiters = duplicates(engine, key, () => runs++);
  await sleep(WAIT_MS);
  release.open();
  return { holder, waiters, before, runs: () => runs };
}

describe(`${N} duplicates waiting on one key (Redis)`, () => {
  it('a holder that completes: every duplicate replays it; O(1) HSETs, a few scripts per waiter', async () => {
    const { holder, waiters, before, runs } = await holdAndWait(() => RESULT);
    const results = await Promise.all(waiters);
    expect(await holder).toEqual({ value: RESULT, replayed: false });
    for (const result of results) expect(result).toEqual({ value: RESULT, replayed: true });
    expect(runs()).toBe(1);

    const spent = delta(before, await commandCalls(admin));
    // The holder's claim and completion are 2 of the scripts; the rest are the waiters'.
    const perWaiter = (scripts(spent) - 2) / N;
    console.info(
      `[wait cost] completed: ${perWaiter.toFixed(2)} scripts and ${((spent.hset ?? 0) / N).toFixed(3)} HSET per waiter (${spent.hset ?? 0} HSETs, ${spent.publish ?? 0} PUBLISH for ${N} waiters over ${WAIT_MS} ms)`,
    );
    // HSET: the holder's claim, the waiter flag (once per record, by the first waiter), the completion.
    expect(spent.hset ?? 0).toBeLessThanOrEqual(3);
    expect(spent.publish ?? 0).toBe(1);
    // Per waiter: its first claim, the claim again once subscribed (a completion in between is not
    // missed), the claim that reads the outcome once notified = 3, plus the safety-net polls: while
    // subscribed they start at 250-500 ms and double, so at most 3 fit in a wait shorter than 3.75 s
    // (1.5 s here, with room for a slow machine). Polling from 25 ms to 1 s, each poll rewriting the
    // waiter flag, measured 8.9 scripts and 7.9 HSETs per waiter here.
    expect(perWaiter).toBeLessThanOrEqual(6);
  });

  it('a holder that releases the key (a 5xx-like error): one duplicate runs it, the others replay that', async () => {
    const { holder, waiters, before, runs } = await holdAndWait(() => {
      throw new Error('downstream unavailable');
    });
    await expect(holder).rejects.toThrow('downstream unavailable');
    const results = await Promise.all(waiters);
    expect(runs()).toBe(2); // the holder, then the one duplicate that took the released key
    for (const result of results) expect(result.value).toEqual(RESULT);
    expect(results.filter((r) => !r.replayed)).toHaveLength(1);

    const spent = delta(before, await commandCalls(admin));
    const perWaiter = (scripts(spent) - 2) / N;
    console.info(
      `[wait cost] released: ${perWaiter.toFixed(2)} scripts and ${((spent.hset ?? 0) / N).toFixed(3)} HSET per waiter (${spent.hset ?? 0} HSETs for ${N} waiters)`,
    );
    // HSET: two claims that took the record (the holder's, then one waiter's), the waiter flag on
    // each of the two records, the completion.
    expect(spent.hset ?? 0).toBeLessThanOrEqual(5);
    // As above, and one more claim each: the one that met the new holder after the release.
    expect(perWaiter).toBeLessThanOrEqual(7);
  });

  it('a holder that crashes (its claim expires unrenewed, nothing published): a duplicate takes over within waitTimeout', async () => {
    // The holder on a client of its own (its process), the duplicates on another, one prefix.
    const prefix = `wc-${randomUUID().slice(0, 8)}:`;
    const holderClient = client();
    const { engine: holderEngine } = await engineOn(holderClient, prefix, 600);
    const { engine, store } = await engineOn(client(), prefix); // waitTimeout: the default 10 s
    const key = randomUUID();
    const never = gate();
    let runs = 0;
    const holder = holderEngine
      .run({ key, name: 'pay', payload: { amount: 500 } }, async () => {
        runs++;
        await never.opened;
        return { chargeId: 'from the crashed holder' };
      })
      .catch((error: unknown) => error);
    await claimed(store, key);
    const before = await commandCalls(admin);
    const waiters = duplicates(engine, key, () => runs++);
    await sleep(100);
    holderClient.disconnect(); // the holder's process is gone: no renewal, no release, no PUBLISH
    const results = await Promise.all(waiters);
    expect(runs).toBe(2); // the crashed holder, then the one duplicate that took the expired claim
    for (const result of results) expect(result.value).toEqual(RESULT);
    expect(results.filter((r) => !r.replayed)).toHaveLength(1);

    const spent = delta(before, await commandCalls(admin));
    console.info(
      `[wait cost] crashed: ${(scripts(spent) / N).toFixed(2)} scripts and ${((spent.hset ?? 0) / N).toFixed(3)} HSET per waiter (${spent.hset ?? 0} HSETs for ${N} waiters)`,
    );
    // HSET: the waiter flag on the crashed claim, the claim that took the record, the flag on it, the completion.
    expect(spent.hset ?? 0).toBeLessThanOrEqual(4);
    never.open();
    await holder;
  });
});

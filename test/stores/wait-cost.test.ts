/**
 * What `inFlight: 'wait'` costs the Redis store. Many duplicates of one key in
 * flight must cost O(1) store writes per record, and a waiter a fixed number
 * of scripts whatever the holder's duration while notifications work: its
 * claim (which writes the waiter flag `w` if no one did), its claim again once
 * it listens (a completion in between is not missed), and the claim that reads
 * the outcome once notified. Polling is only for a store that cannot notify
 * (here: while its subscriber connection is down). Counted through INFO
 * commandstats on a private redis-server, so nothing else runs there.
 * A waiter must still be served whether the holder completes, releases the
 * key (a 5xx-like error) or crashes (its claim expires unrenewed, nothing is
 * published), and when the notification is lost.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIdempotencyEngine, type IdempotencyEngine, type IdempotencyPolicyOptions } from '../../src/index.js';
import { type RedisClient, type RedisStore, redisStore } from '../../src/redis.js';
import { connectionOf } from '../../src/stores/redis/client.js';
import { settledNotifications } from '../../src/stores/redis/notifications.js';
import { sleep } from '../helpers/redis.js';
import { commandCalls, delta, type PrivateRedis, startPrivateRedis } from '../helpers/redis-server.js';
import { gate } from '../helpers/trpc.js';

/** Duplicates of one key, all in flight at once. */
const N = 300;
const RESULT = { chargeId: 'ch_1', amount: 500 };
const LIBRARIES = ['ioredis', 'node-redis'] as const;
type Library = (typeof LIBRARIES)[number];

let redisServer: PrivateRedis;
let admin: Redis;
const cleanups: (() => unknown)[] = [];

beforeAll(async () => {
  redisServer = await startPrivateRedis();
  admin = new Redis({ port: redisServer.port });
});
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  admin?.disconnect();
  await redisServer?.stop();
});

async function client(library: Library = 'ioredis'): Promise<RedisClient> {
  if (library === 'node-redis') {
    const c = createClient({ socket: { port: redisServer.port, host: '127.0.0.1' } });
    c.on('error', () => {});
    await c.connect();
    cleanups.push(() => c.destroy());
    return c;
  }
  const c = new Redis({ port: redisServer.port });
  c.on('error', () => {});
  cleanups.push(() => c.disconnect());
  return c;
}

/**
 * An engine on its own client and prefix, its scripts loaded (claim, complete, release: so the counts hold no
 * EVALSHA refused for a NOSCRIPT and its EVAL).
 */
async function engineOn(
  c: RedisClient,
  prefix = `wc-${randomUUID().slice(0, 8)}:`,
  options: IdempotencyPolicyOptions = {},
) {
  const store = redisStore({ client: c, prefix });
  cleanups.push(() => store.close());
  const engine = createIdempotencyEngine({ store, inFlight: 'wait', ...options });
  const warmUp = (fn: () => Promise<string>) =>
    engine.run({ key: `warm-up-${randomUUID()}`, name: 'pay', payload: {} }, fn);
  await warmUp(async () => 'warm');
  await expect(
    warmUp(async () => {
      throw new Error('released');
    }),
  ).rejects.toThrow('released');
  return { engine, store, prefix };
}

const scripts = (calls: Record<string, number>) => (calls.evalsha ?? 0) + (calls.eval ?? 0);
const spentSince = async (before: Record<string, number>) => delta(before, await commandCalls(admin));

/** Waits until the holder's claim is in Redis. */
async function claimed(store: RedisStore, key: string) {
  await expect.poll(() => admin.exists(store.keyOf(`:pay:${key}`)), { timeout: 5_000 }).toBe(1);
}

/**
 * Waits until `count` scripts ran since `before`: with the holder's claim and two per duplicate (its claim,
 * then the claim once it listens), every duplicate is waiting for the notification.
 */
async function scriptsRan(before: Record<string, number>, count: number) {
  await expect.poll(async () => scripts(await spentSince(before)), { timeout: 10_000 }).toBeGreaterThanOrEqual(count);
}

function duplicates(engine: IdempotencyEngine, key: string, onRun: () => void, n = N) {
  return Array.from({ length: n }, () =>
    engine.run({ key, name: 'pay', payload: { amount: 500 } }, async () => {
      onRun();
      return RESULT;
    }),
  );
}

/**
 * A holder of a fresh key and `n` duplicates of it; once every duplicate waits, the holder runs on for
 * `holdMs` (the duration under test: real time, as a holder's is) and settles with `settle`.
 */
async function holdAndWait(
  c: RedisClient,
  holdMs: number,
  settle: () => unknown,
  { n = N, options }: { n?: number; options?: IdempotencyPolicyOptions } = {},
) {
  const { engine, store, prefix } = await engineOn(c, undefined, options);
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
  const waiters = duplicates(engine, key, () => runs++, n);
  await scriptsRan(before, 1 + 2 * n);
  if (holdMs > 0) await sleep(holdMs); // real time, bounded: that no waiter sends anything meanwhile has no event to wait for
  return { holder, waiters, before, release: release.open, runs: () => runs, channel: `${prefix}settled` };
}

describe(`${N} duplicates waiting on one key (Redis)`, () => {
  describe.each(LIBRARIES)('on %s', (library) => {
    it.each([0, 1_000])(
      'a holder that completes %i ms after every duplicate waits: each replays it for exactly 3 scripts, 3 HSETs and 1 PUBLISH in all',
      async (holdMs) => {
        const { holder, waiters, before, release, runs } = await holdAndWait(
          await client(library),
          holdMs,
          () => RESULT,
        );
        release();
        const results = await Promise.all(waiters);
        expect(await holder).toEqual({ value: RESULT, replayed: false });
        for (const result of results) expect(result).toEqual({ value: RESULT, replayed: true });
        expect(runs()).toBe(1);

        const spent = await spentSince(before);
        // The holder's claim and completion are 2 of the scripts; the rest are the waiters'.
        const perWaiter = (scripts(spent) - 2) / N;
        console.info(
          `[wait cost] ${library}, holder ran ${holdMs} ms after the duplicates waited: ${perWaiter.toFixed(2)} scripts per waiter, ${spent.hset ?? 0} HSETs, ${spent.publish ?? 0} PUBLISH in all`,
        );
        // Per waiter: its claim, its claim once it listens, the claim that reads the outcome once
        // notified; nothing while the holder runs, however long (lockTtl, 30 s, outlives the wait).
        expect(perWaiter).toBe(3);
        // Inside the scripts: the two claims that found the record held read its PTTL (when to check for a
        // crashed holder); HSET: the holder's claim, the waiter flag (by the first waiter only), the completion.
        expect(spent.pttl).toBe(2 * N);
        expect(spent.hset ?? 0).toBe(3);
        expect(spent.publish ?? 0).toBe(1);
      },
    );
  });

  it('a holder that releases the key (a 5xx-like error): one duplicate runs it, the others replay that', async () => {
    const { holder, waiters, before, release, runs } = await holdAndWait(await client(), 500, () => {
      throw new Error('downstream unavailable');
    });
    release();
    await expect(holder).rejects.toThrow('downstream unavailable');
    const results = await Promise.all(waiters);
    expect(runs()).toBe(2); // the holder, then the one duplicate that took the released key
    for (const result of results) expect(result.value).toEqual(RESULT);
    expect(results.filter((r) => !r.replayed)).toHaveLength(1);

    const spent = await spentSince(before);
    const perWaiter = (scripts(spent) - 2) / N;
    console.info(
      `[wait cost] released: ${perWaiter.toFixed(2)} scripts per waiter, ${spent.hset ?? 0} HSETs for ${N} waiters`,
    );
    // HSET: two claims that took the record (the holder's, then one waiter's), the waiter flag on
    // each of the two records, the completion.
    expect(spent.hset ?? 0).toBeLessThanOrEqual(5);
    // Its claim, its claim once it listens, the claim once the release is published (which meets the
    // new holder, or takes the key: then the completion is this waiter's), the claim that reads the outcome.
    expect(perWaiter).toBeLessThanOrEqual(4);
  });

  it('a holder that crashes (its claim expires unrenewed, nothing published): a duplicate takes over once it expires', async () => {
    // The holder on a client of its own (its process), the duplicates on another, one prefix.
    const holderClient = (await client()) as Redis;
    const { engine: holderEngine, prefix } = await engineOn(holderClient, undefined, { lockTtl: 600 });
    const { engine, store } = await engineOn(await client(), prefix); // waitTimeout: the default 10 s
    const key = randomUUID();
    const never = gate();
    let runs = 0;
    const before = await commandCalls(admin);
    const holder = holderEngine
      .run({ key, name: 'pay', payload: { amount: 500 } }, async () => {
        runs++;
        await never.opened;
        return { chargeId: 'from the crashed holder' };
      })
      .catch((error: unknown) => error);
    await claimed(store, key);
    const waiters = duplicates(engine, key, () => runs++);
    await scriptsRan(before, 1 + 2 * N);
    const renewalsBefore = scripts(await spentSince(before)) - 1 - 2 * N;
    holderClient.disconnect(); // the holder's process is gone: no renewal, no release, no PUBLISH
    const results = await Promise.all(waiters);
    expect(runs).toBe(2); // the crashed holder, then the one duplicate that took the expired claim
    for (const result of results) expect(result.value).toEqual(RESULT);
    expect(results.filter((r) => !r.replayed)).toHaveLength(1);

    const spent = await spentSince(before);
    // The holder's claim, its renewals before it crashed, the new holder's completion.
    const perWaiter = (scripts(spent) - 2 - renewalsBefore) / N;
    console.info(
      `[wait cost] crashed: ${perWaiter.toFixed(2)} scripts per waiter, ${spent.hset ?? 0} HSETs for ${N} waiters`,
    );
    // HSET: the holder's claim, the waiter flag on it, the claim that took the record, the flag on it, the completion.
    expect(spent.hset ?? 0).toBeLessThanOrEqual(5);
    // Its claim, its claim once it listens, a check when the holder's claim expires unless renewed (and
    // one more for a renewal the holder made before it crashed, after the waiter's claim), the final read.
    // One renewal may land between the count above and the disconnect (a loaded machine): 1 / N more.
    expect(perWaiter).toBeLessThanOrEqual(5 + 1 / N);
    never.open();
    await holder;
  });

  describe.each(LIBRARIES)('the store subscriber connection lost, on %s', (library) => {
    /** No connection can be opened until the returned function is called: the subscriber, cut, stays away. */
    async function refuseConnections() {
      const [, max] = (await admin.config('GET', 'maxclients')) as [string, string];
      await admin.config('SET', 'maxclients', '1');
      let restored = false;
      const restore = async () => {
        if (restored) return;
        restored = true;
        await admin.config('SET', 'maxclients', max);
      };
      cleanups.push(restore);
      return restore;
    }

    it('a completion published meanwhile (heard by no one) still reaches every duplicate, long before waitTimeout', async () => {
      // waitTimeout outlives the test: only a check before it can serve the duplicates.
      const n = 20;
      const { holder, waiters, release, channel } = await holdAndWait(await client(library), 0, () => RESULT, {
        n,
        options: { waitTimeout: 2 ** 31 - 1 },
      });
      const restore = await refuseConnections();
      try {
        expect(Number(await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub'))).toBeGreaterThanOrEqual(1);
        release();
        expect(await holder).toEqual({ value: RESULT, replayed: false });
        expect(await admin.pubsub('NUMSUB', channel)).toEqual([channel, 0]); // its PUBLISH reached no one
        const results = await Promise.all(waiters);
        for (const result of results) expect(result).toEqual({ value: RESULT, replayed: true });
      } finally {
        await restore();
      }
    });

    it('tells its listeners that notifications stopped, and to check once they are back (messages in between are lost); then they hear the channel again', async () => {
      const connection = connectionOf(await client(library))!;
      const channel = `wc-${randomUUID().slice(0, 8)}:settled`;
      const notifications = settledNotifications(connection, channel);
      cleanups.push(() => notifications.close());
      const heard: (boolean | undefined)[] = [];
      const off = await notifications.listen('k', (notifying) => heard.push(notifying));
      const restore = await refuseConnections();
      try {
        expect(Number(await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub'))).toBeGreaterThanOrEqual(1);
        await expect.poll(() => heard).toEqual([false]);
        // A listener that comes while they are down is told at once.
        const late: (boolean | undefined)[] = [];
        const offLate = await notifications.listen('k', (notifying) => late.push(notifying));
        expect(late).toEqual([false]);
        offLate();
      } finally {
        await restore();
      }
      await expect.poll(() => heard, { timeout: 10_000 }).toEqual([false, true]);
      await admin.publish(channel, 'k');
      await expect.poll(() => heard).toEqual([false, true, undefined]);
      off();
    });
  });
});

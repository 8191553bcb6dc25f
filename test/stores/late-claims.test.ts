/**
 * Claims that reach Redis late or twice, through real ioredis (and, late, node-redis) clients on a
 * real Redis, with a TCP pipe in front that holds requests back (what
 * ioredis's offline queue does through an outage) or cuts the connection
 * after Redis answered (ioredis then sends the command again).
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createIdempotencyEngine, type IdempotencyEvent } from '../../src/index.js';
import { type RedisClient, redisStore } from '../../src/redis.js';
import { CLAIM } from '../../src/stores/redis/scripts.js';
import { startPipe } from '../helpers/proxy.js';
import { connectRedis, deleteByPrefix, REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { watchedStore } from '../helpers/store-calls.js';
import { startTriggerProxy } from '../helpers/trigger-proxy.js';
import { gate } from '../helpers/trpc.js';

const redis = connectRedis();
const prefix = uniquePrefix('late');
const redisPort = Number(new URL(REDIS_URL).port || 6379);
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
afterAll(async () => {
  await deleteByPrefix(redis, prefix);
  redis.disconnect();
});

/** A pipe to Redis that can hold every request back, then let them through in order. */
async function holdingPipe() {
  let held: [{ write(chunk: Buffer): unknown }, Buffer][] | undefined;
  const pipe = await startPipe({ port: redisPort }, (_client, upstream) => ({
    fromClient(chunk) {
      if (held === undefined) upstream.write(chunk);
      else held.push([upstream, chunk]);
    },
  }));
  cleanups.push(() => pipe.close());
  return {
    port: pipe.port,
    /** The chunks held back so far. */
    held: () => held?.length ?? 0,
    hold() {
      held = [];
    },
    release() {
      const chunks = held ?? [];
      held = undefined;
      for (const [upstream, chunk] of chunks) upstream.write(chunk);
    },
  };
}

/** A client of `library` on `port`, connected. */
async function client(port: number, library: 'ioredis' | 'node-redis' = 'ioredis'): Promise<RedisClient> {
  if (library === 'node-redis') {
    const c = createClient({ socket: { port, host: '127.0.0.1' } });
    c.on('error', () => {});
    await c.connect();
    cleanups.push(() => c.destroy());
    return c;
  }
  const c = new Redis({ port });
  c.on('error', () => {});
  cleanups.push(() => c.disconnect());
  return c;
}

const STORE_TIMEOUT = 200;

describe.each(['ioredis', 'node-redis'] as const)(
  'a claim that reaches Redis after its caller gave up (%s)',
  (library) => {
    it.each([
      ['on the same instance as the holder', true, true],
      ['on another instance', false, true],
      // its claim carries no deadline: it takes the key, is given back, and the holder's completion, refused meanwhile, is tried again
      ['on another instance that never had an answer from Redis before', false, false],
    ])(
      '%s never takes the key from a holder whose completion follows it: one execution, the retry replays',
      async (_label, sameInstance, warm) => {
        const holderPipe = await holdingPipe();
        const retryPipe = sameInstance ? holderPipe : await holdingPipe();
        const events: IdempotencyEvent[] = [];
        const options = {
          lockTtl: 30_000,
          storeTimeout: STORE_TIMEOUT,
          onEvent: (e: IdempotencyEvent) => events.push(e),
        };
        // watched: the late claim's answer, and the give-back it may lead to, are calls of these stores
        const holderStore = watchedStore(redisStore({ client: await client(holderPipe.port, library), prefix }));
        const holder = createIdempotencyEngine({ store: holderStore.store, ...options });
        const otherStore = sameInstance
          ? holderStore
          : watchedStore(redisStore({ client: await client(retryPipe.port, library), prefix }));
        const other = sameInstance ? holder : createIdempotencyEngine({ store: otherStore.store, ...options });
        // engines that have had a claim answered know Redis's clock
        await holder.run({ key: randomUUID(), name: 'warm', payload: {} }, async () => 0);
        if (warm) await other.run({ key: randomUUID(), name: 'warm', payload: {} }, async () => 0);

        const input = { key: randomUUID(), name: 'pay', payload: { amount: 5 } };
        let runs = 0;
        const charging = gate();
        const first = holder.run(input, async () => {
          runs++;
          await charging.opened;
          return `charge-${runs}`;
        });
        await expect.poll(() => runs).toBe(1);

        // Redis goes away: requests wait (as a client queues them through an outage), and it comes back empty.
        holderPipe.hold();
        retryPipe.hold();
        // the client retries meanwhile: refused after the store timeout, its claim still queued
        await expect(other.run(input, async () => `charge-${++runs}`)).rejects.toMatchObject({
          reason: 'store_unavailable',
        });
        const queued = holderPipe.held();
        charging.open(); // the charge finishes: its completion is sent, and queued behind the late claim
        await expect.poll(() => holderPipe.held()).toBeGreaterThan(queued);
        await redis.del(holderStore.store.keyOf(`:pay:${input.key}`)); // the restart lost the claim
        retryPipe.release(); // the late claim lands first...
        holderPipe.release(); // ...then the holder's completion, still awaited

        expect(await first).toEqual({ value: 'charge-1', replayed: false });
        // the outcome stored (a completion refused by the late claim is tried again, in the background), and
        // the late claim answered, its give-back too, if there is one
        const completions = () => events.filter((e) => e.result === 'completed' && e.name === 'pay').length;
        await expect.poll(completions, { timeout: 5_000 }).toBe(1);
        await otherStore.settled();
        expect(await other.run(input, async () => `charge-${++runs}`)).toEqual({ value: 'charge-1', replayed: true });
        expect(runs).toBe(1);
        expect(completions()).toBe(1);
        expect(events.filter((e) => e.result === 'lease_lost')).toEqual([]);
      },
    );
  },
);

describe('a claim that ioredis sends twice', () => {
  it('after a reconnect, the claim that holds the record is the caller own: it runs, once', async () => {
    const proxy = await startTriggerProxy(redisPort);
    cleanups.push(() => proxy.close());
    const store = redisStore({ client: await client(proxy.port), prefix });
    const engine = createIdempotencyEngine({ store, storeTimeout: 3_000 });
    await engine.run({ key: randomUUID(), name: 'warm', payload: {} }, async () => 0);
    const input = { key: randomUUID(), name: 'pay', payload: { amount: 7 } };
    // Redis applies the claim, then the connection drops before its answer: ioredis sends it again
    const cut = proxy.arm(CLAIM.sha, 'after-reply', async () => {});
    let runs = 0;
    const answer = await engine.run(input, async () => `charge-${++runs}`).catch((e: unknown) => e);
    await cut;
    expect(answer).toEqual({ value: 'charge-1', replayed: false });
    expect(await engine.run(input, async () => `charge-${++runs}`)).toEqual({ value: 'charge-1', replayed: true });
    expect(runs).toBe(1);
  });
});

import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../src/index.js';
import { redisStore } from '../src/redis.js';
import { describeStoreContract } from './contract/store-contract.js';
import { connectRedis, deleteByPrefix, REDIS_URL, sleep, uniquePrefix } from './helpers/redis.js';

describeStoreContract('memory', () => {
  let time = 1_700_000_000_000;
  const store = memoryStore({ now: () => time });
  return {
    store,
    advance: async (ms) => {
      time += ms;
    },
  };
});

const redis = connectRedis();
const prefix = uniquePrefix('contract');
const stores: { close(): Promise<void> }[] = [];
afterAll(async () => {
  await Promise.all(stores.map((s) => s.close()));
  await deleteByPrefix(redis, prefix);
  redis.disconnect();
});

describeStoreContract('redis', () => {
  const store = redisStore({ client: redis, prefix });
  stores.push(store);
  return { store, advance: sleep };
});

// ioredis's enableAutoPipelining sends the commands of one tick together (docs/performance.md recommends it).
const pipelined = new Redis(REDIS_URL, { enableAutoPipelining: true });
afterAll(() => pipelined.disconnect());
describeStoreContract('redis, client with enableAutoPipelining', () => {
  const store = redisStore({ client: pipelined, prefix });
  stores.push(store);
  return { store, advance: sleep };
});

describe('redis store specifics', () => {
  it('reloads its scripts after SCRIPT FLUSH (a restart or failover empties the cache)', async () => {
    const store = redisStore({ client: redis, prefix });
    await redis.script('FLUSH');
    const id = `:flush:${Date.now()}`;
    expect(await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 1_000 })).toMatchObject({
      state: 'acquired',
    });
    await redis.script('FLUSH');
    expect(
      await store.complete({ fingerprint: 'fp', id, token: 't', state: 'completed', body: 'b', ttl: 10_000 }),
    ).toBe('stored');
    expect(await redis.hgetall(store.keyOf(id))).toEqual({ s: 'c', f: 'fp', b: 'b', t: 't' });
  });

  it('keeps one hash per record under a hash tag, with the claim TTL and then the outcome TTL', async () => {
    const store = redisStore({ client: redis, prefix });
    const id = `u1:pay:${Date.now()}`;
    expect(store.keyOf(id)).toBe(`${prefix}{${id}}`);
    await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 5_000 });
    const claimTtl = await redis.pttl(store.keyOf(id));
    expect(claimTtl).toBeGreaterThan(4_000);
    expect(claimTtl).toBeLessThanOrEqual(5_000);
    await store.complete({ fingerprint: 'fp', id, token: 't', state: 'completed', body: '{}', ttl: 86_400_000 });
    expect(await redis.pttl(store.keyOf(id))).toBeGreaterThan(86_000_000);
  });

  it('refuses a client that is not ioredis and a prefix with braces', () => {
    expect(() => redisStore({ client: {} as never })).toThrow(/must be an ioredis Redis or Cluster instance/);
    expect(() => redisStore({ client: redis, prefix: 'a{b}' })).toThrow(/without braces/);
  });
});

describe('redis store with a client keyPrefix', () => {
  it('still notifies waiters (the notice names the key without the client prefix)', async () => {
    const prefixed = new Redis(REDIS_URL, { keyPrefix: 'app:' });
    const store = redisStore({ client: prefixed, prefix });
    try {
      const id = `:prefixed:${Date.now()}`;
      await store.claim({ id, fingerprint: 'fp', token: 'a', lockTtl: 5_000 });
      await store.claim({ id, fingerprint: 'fp', token: 'w', lockTtl: 5_000, waiting: true });
      let notified = false;
      const off = await store.onSettled!(id, () => (notified = true));
      expect(await redis.exists(`app:${store.keyOf(id)}`)).toBe(1);
      await store.complete({ fingerprint: 'fp', id, token: 'a', state: 'completed', body: 'x', ttl: 10_000 });
      await expect.poll(() => notified, { timeout: 2_000 }).toBe(true);
      off();
      await redis.del(`app:${store.keyOf(id)}`);
    } finally {
      await store.close();
      prefixed.disconnect();
    }
  });
});

describe('memory store bounds', () => {
  it('evicts expired records first, then the oldest finished ones, never a running claim', async () => {
    let time = 0;
    const store = memoryStore({ maxEntries: 3, now: () => time });
    await store.claim({ id: 'running', fingerprint: 'fp', token: 'r', lockTtl: 60_000 });
    for (const id of ['old', 'young']) {
      await store.claim({ id, fingerprint: 'fp', token: id, lockTtl: 60_000 });
      await store.complete({ fingerprint: 'fp', id, token: id, state: 'completed', body: id, ttl: 60_000 });
      time += 10;
    }
    await store.claim({ id: 'newcomer', fingerprint: 'fp', token: 'n', lockTtl: 60_000 });
    expect(await store.claim({ id: 'old', fingerprint: 'fp', token: 'x', lockTtl: 1 })).toMatchObject({
      state: 'acquired',
    });
    expect(await store.claim({ id: 'running', fingerprint: 'fp', token: 'x', lockTtl: 1 })).toMatchObject({
      state: 'in_progress',
      fingerprint: 'fp',
    });
    store.close();
  });

  it('refuses a new claim when every entry is a running claim, saying what to change', async () => {
    const store = memoryStore({ maxEntries: 2 });
    await store.claim({ id: 'a', fingerprint: 'fp', token: 'a', lockTtl: 60_000 });
    await store.claim({ id: 'b', fingerprint: 'fp', token: 'b', lockTtl: 60_000 });
    await expect(store.claim({ id: 'c', fingerprint: 'fp', token: 'c', lockTtl: 60_000 })).rejects.toThrow(
      /full: all 2 entries are running claims. Raise maxEntries/,
    );
    store.close();
  });

  it('keeps the steps of at most maxEntries records, refusing a new one until some expire', async () => {
    let time = 1_700_000_000_000;
    const store = memoryStore({ maxEntries: 2, now: () => time });
    const recordStep = async (id: string) => {
      await store.claim({ id, fingerprint: 'fp', token: id, lockTtl: 60_000 });
      const saved = store.saveStep!({ id, token: id, fingerprint: 'fp', index: 0, name: 's', body: '1', ttl: 1_000 });
      // released: the claim goes, its steps stay for the retry
      return saved.finally(() => store.release({ id, token: id }));
    };
    expect(await recordStep('a')).toBe('stored');
    expect(await recordStep('b')).toBe('stored');
    await expect(recordStep('c')).rejects.toThrow('memoryStore is full: 2 records keep steps. Raise maxEntries.');
    time += 1_001; // a's and b's steps expire
    expect(await recordStep('c')).toBe('stored');
    store.close();
  });
});

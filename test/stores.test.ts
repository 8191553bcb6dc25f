import { afterAll, describe, expect, it } from 'vitest';
import { memoryStore } from '../src/index.js';
import { redisStore } from '../src/redis.js';
import { describeStoreContract } from './contract/store-contract.js';
import { connectRedis, deleteByPrefix, sleep, uniquePrefix } from './helpers/redis.js';

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

describe('redis store specifics', () => {
  it('reloads its scripts after SCRIPT FLUSH (a restart or failover empties the cache)', async () => {
    const store = redisStore({ client: redis, prefix });
    await redis.script('FLUSH');
    const id = `:flush:${Date.now()}`;
    expect(await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 1_000 })).toEqual({ state: 'acquired' });
    await redis.script('FLUSH');
    expect(await store.complete({ id, token: 't', state: 'completed', body: 'b', ttl: 10_000 })).toBe(true);
    expect(await redis.hgetall(store.keyOf(id))).toEqual({ s: 'c', f: 'fp', b: 'b' });
  });

  it('keeps one hash per record under a hash tag, with the claim TTL and then the outcome TTL', async () => {
    const store = redisStore({ client: redis, prefix });
    const id = `u1:pay:${Date.now()}`;
    expect(store.keyOf(id)).toBe(`${prefix}{${id}}`);
    await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 5_000 });
    const claimTtl = await redis.pttl(store.keyOf(id));
    expect(claimTtl).toBeGreaterThan(4_000);
    expect(claimTtl).toBeLessThanOrEqual(5_000);
    await store.complete({ id, token: 't', state: 'completed', body: '{}', ttl: 86_400_000 });
    expect(await redis.pttl(store.keyOf(id))).toBeGreaterThan(86_000_000);
  });

  it('refuses a client that is not ioredis and a prefix with braces', () => {
    expect(() => redisStore({ client: {} as never })).toThrow(/must be an ioredis Redis or Cluster instance/);
    expect(() => redisStore({ client: redis, prefix: 'a{b}' })).toThrow(/without braces/);
  });
});

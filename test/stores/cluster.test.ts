/**
 * The Redis store on a real 3-master Redis Cluster started for this file:
 * the store contract, and concurrent claims spread over many slots.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createIdempotencyEngine } from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import { describeStoreContract } from '../contract/store-contract.js';
import { sleep } from '../helpers/redis.js';
import { liveStores } from '../helpers/stores.js';
import { gate } from '../helpers/trpc.js';

// A plain client, and one with enableAutoPipelining (commands of one tick sent together, per node).
const live = liveStores('cluster', [
  'redis cluster',
  'redis cluster, autopipelining',
  'redis cluster, restart fence',
  'redis cluster, replicas acknowledged',
  'redis cluster, node-redis',
]);
for (const { name, make, notifies } of live.stores)
  describeStoreContract(name, () => ({ store: make(), advance: sleep }), { notifies });

describe('redis cluster', () => {
  it('records spread over all masters, and each key runs once under concurrency', async () => {
    const client = live.cluster();
    const store = redisStore({ client, prefix: 'spread:' });
    const engine = createIdempotencyEngine({ store });
    const keys = Array.from({ length: 30 }, () => randomUUID());
    const runs = new Map<string, number>();
    const running = () => [...runs.values()].reduce((a, b) => a + b, 0);
    // every run holds its key until each of the 300 calls has run or been answered: all of them overlap
    const release = gate();
    let answered = 0;
    const calls = keys.flatMap((key) =>
      Array.from({ length: 10 }, () =>
        engine
          .run({ key, name: 'pay', payload: { key } }, async () => {
            runs.set(key, (runs.get(key) ?? 0) + 1);
            await release.opened;
            return key;
          })
          .catch((e: { reason?: string }) => e.reason)
          .finally(() => answered++),
      ),
    );
    await expect.poll(() => answered + running(), { timeout: 10_000 }).toBe(calls.length);
    release.open();
    await Promise.all(calls);
    expect([...runs.values()]).toEqual(keys.map(() => 1));
    const keysPerNode = await Promise.all(client.nodes('master').map((node) => node.dbsize()));
    expect(keysPerNode.every((n) => n > 0)).toBe(true);
  });
});

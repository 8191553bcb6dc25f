/**
 * The Redis store on a real 3-master Redis Cluster started for this file:
 * the store contract, and concurrent claims spread over many slots.
 */
import { randomUUID } from 'node:crypto';
import { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIdempotencyEngine } from '../../src/index.js';
import { type RedisStore, redisStore } from '../../src/redis.js';
import { describeStoreContract } from '../contract/store-contract.js';
import { sleep } from '../helpers/redis.js';
import { type PrivateCluster, startPrivateCluster } from '../helpers/redis-server.js';

let cluster: PrivateCluster;
let client: Cluster;
/** The same cluster through a client with enableAutoPipelining (commands of one tick sent together, per node). */
let pipelined: Cluster;
const stores: RedisStore[] = [];

beforeAll(async () => {
  cluster = await startPrivateCluster(3);
  const nodes = cluster.ports.map((port) => ({ host: '127.0.0.1', port }));
  client = new Cluster(nodes);
  pipelined = new Cluster(nodes, { enableAutoPipelining: true });
  await Promise.all([client.ping(), pipelined.ping()]);
}, 60_000);
afterAll(async () => {
  await Promise.all(stores.map((s) => s.close()));
  client?.disconnect();
  pipelined?.disconnect();
  await cluster?.stop();
});

describeStoreContract('redis cluster', () => {
  const store = redisStore({ client, prefix: 'c:' });
  stores.push(store);
  return { store, advance: sleep };
});

describeStoreContract('redis cluster, client with enableAutoPipelining', () => {
  const store = redisStore({ client: pipelined, prefix: 'cp:' });
  stores.push(store);
  return { store, advance: sleep };
});

describe('redis cluster', () => {
  it('records spread over all masters, and each key runs once under concurrency', async () => {
    const store = redisStore({ client, prefix: 'spread:' });
    const engine = createIdempotencyEngine({ store });
    const keys = Array.from({ length: 30 }, () => randomUUID());
    const runs = new Map<string, number>();
    await Promise.all(
      keys.flatMap((key) =>
        Array.from({ length: 10 }, () =>
          engine
            .run({ key, name: 'pay', payload: { key } }, async () => {
              runs.set(key, (runs.get(key) ?? 0) + 1);
              await sleep(20);
              return key;
            })
            .catch((e: { reason?: string }) => e.reason),
        ),
      ),
    );
    expect([...runs.values()]).toEqual(keys.map(() => 1));
    const keysPerNode = await Promise.all(client.nodes('master').map((node) => node.dbsize()));
    expect(keysPerNode.every((n) => n > 0)).toBe(true);
  });
});

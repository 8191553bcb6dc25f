/**
 * The model-based contract on the Redis topologies the tests start themselves: a 3-master Cluster (ioredis plain,
 * autopipelined, with the restart fence; node-redis; ioredis with waitForReplicas on a Cluster whose masters have a
 * replica each) and a Sentinel set (a primary with 2 replicas and 3 Sentinels: ioredis plain and with
 * waitForReplicas, node-redis). Apart from the unit run, which it would lengthen by the topologies' start (tens of
 * seconds): `npm run test:model` runs it (`npm run test:model -- test/model/topologies.test.ts` alone).
 */
import { Redis } from 'ioredis';
import { createSentinel } from 'redis';
import { afterAll, beforeAll, describe } from 'vitest';
import { type RedisClient, redisStore } from '../../src/redis.js';
import { sleep } from '../helpers/redis.js';
import { type SentinelSet, startSentinelSet } from '../helpers/redis-topology.js';
import { liveStores } from '../helpers/stores.js';
import { type ModelHarness, modelTest } from './model-run.js';

const RUNS = 50;
const harness = (store: ModelHarness['store']): ModelHarness => ({
  store,
  clock: Date.now,
  advance: sleep,
  slack: 2,
  inclusiveExpiry: true,
});

describe('redis cluster', () => {
  const live = liveStores('model-cluster', [
    'redis cluster',
    'redis cluster, autopipelining',
    'redis cluster, restart fence',
    'redis cluster, replicas acknowledged',
    'redis cluster, node-redis',
  ]);
  for (const { name, make } of live.stores) modelTest(name, () => harness(make()), RUNS);
});

describe('redis sentinel', () => {
  let set: SentinelSet;
  const closers: (() => unknown)[] = [];
  const clients = {} as Record<'ioredis' | 'node-redis', RedisClient>;
  beforeAll(async () => {
    set = await startSentinelSet({ delayMs: 0 });
    const ioredis = new Redis({ sentinels: set.sentinels, name: set.name });
    ioredis.on('error', () => {});
    closers.push(() => ioredis.disconnect());
    const nodeRedis = createSentinel({ name: set.name, sentinelRootNodes: set.sentinels });
    nodeRedis.on('error', () => {});
    await nodeRedis.connect();
    closers.push(() => nodeRedis.destroy());
    clients.ioredis = ioredis;
    clients['node-redis'] = nodeRedis;
  }, 120_000);
  afterAll(async () => {
    for (const close of closers) await Promise.resolve(close()).catch(() => {});
    await set?.stop();
  });

  // node-redis's Sentinel client spreads commands over a pool: the store refuses waitForReplicas on it.
  for (const [library, durable] of [
    ['ioredis', false],
    ['ioredis', true],
    ['node-redis', false],
  ] as const) {
    const name = `${library} Sentinel client${durable ? ', waitForReplicas' : ''}`;
    modelTest(
      name,
      () =>
        harness(
          redisStore({
            client: clients[library],
            prefix: `model-sentinel-${library}-${durable}:`,
            ...(durable ? { waitForReplicas: { replicas: 1, timeout: 3_000 } } : {}),
          }),
        ),
      RUNS,
    );
  }
});

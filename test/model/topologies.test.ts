import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe } from 'vitest';
import { type RedisStore, redisStore } from '../../src/redis.js';
import { keySlot } from '../../src/stores/redis/fence.js';
import { sleep } from '../helpers/redis.js';
import {
  connectSentinelClients,
  type SentinelClients,
  type SentinelSet,
  startSentinelSet,
} from '../helpers/redis-topology.js';
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
  for (const { name, make } of live.stores) {
    if (name !== 'redis cluster, restart fence') {
      modelTest(name, () => harness(make()), RUNS);
      continue;
    }
    // The store loses its data on every master at once, markers too (an empty restart of the whole Cluster).
    modelTest(
      name,
      () => {
        const store = make() as RedisStore;
        const wipe = async () => {
          for (const node of live.cluster().nodes('master')) await deleteEachByPrefix(node, 'cf:');
        };
        const rearm = async () => {
          await wipe();
          await store.initialize();
        };
        // One marker per slot; a record's slot is its id's (the hash tag of its key).
        const markerOf = (id: string) => String(keySlot(id));
        return { ...harness(store), restart: { fence: true, markerOf, wipe, rearm } };
      },
      RUNS,
    );
  }
});

/** Deletes the keys under `prefix` on one Cluster node, one DEL each (keys of several slots cannot share one). */
async function deleteEachByPrefix(node: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await node.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    if (keys.length > 0) await Promise.all(keys.map((key) => node.del(key)));
    cursor = next;
  } while (cursor !== '0');
}

describe('redis sentinel', () => {
  let set: SentinelSet;
  let connected: SentinelClients | undefined;
  let clients: SentinelClients['clients'];
  beforeAll(async () => {
    set = await startSentinelSet({ delayMs: 0 });
    connected = await connectSentinelClients(set);
    clients = connected.clients;
  }, 120_000);
  afterAll(async () => {
    await connected?.close();
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

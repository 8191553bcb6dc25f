import { afterAll, beforeAll, describe } from 'vitest';
import { redisStore } from '../../src/redis.js';
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
  for (const { name, make } of live.stores) modelTest(name, () => harness(make()), RUNS);
});

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

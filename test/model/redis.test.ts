/**
 * The model-based contract on the Redis store, single node: ioredis (plain, autopipelined), node-redis, each with
 * the restart fence (its marker in place: the fenced scripts must answer as the plain ones) and with
 * waitForReplicas on a private primary with one replica. Sentinel and Cluster: topologies.test.ts.
 */
import { sleep } from '../helpers/redis.js';
import { liveStores } from '../helpers/stores.js';
import { modelTest } from './model-run.js';

const live = liveStores('model', [
  'redis',
  'redis, autopipelining',
  'redis, restart fence',
  'redis, replicas acknowledged',
  'redis, node-redis',
  'redis, node-redis, restart fence',
  'redis, node-redis, replicas acknowledged',
]);

for (const { name, make } of live.stores)
  modelTest(name, () => ({ store: make(), clock: Date.now, advance: sleep, slack: 2, inclusiveExpiry: true }), 50);

/**
 * The model-based contract on the Redis store, single node: ioredis (plain, autopipelined), node-redis, each with
 * the restart fence and with waitForReplicas on a private primary with one replica. Sentinel and Cluster:
 * topologies.test.ts. On the plain ioredis store and both fenced ones, sequences include the store losing
 * everything (its keys deleted, the fence's marker with them, as an empty restart leaves Redis): with the fence,
 * the oracle runs behind restart-fence.ts; without it, an empty restart is a store that forgot.
 */
import type { RedisStore } from '../../src/redis.js';
import { deleteByPrefix, sleep } from '../helpers/redis.js';
import { liveStores } from '../helpers/stores.js';
import { type ModelHarness, modelTest } from './model-run.js';

const live = liveStores('model', [
  'redis',
  'redis, autopipelining',
  'redis, restart fence',
  'redis, replicas acknowledged',
  'redis, node-redis',
  'redis, node-redis, restart fence',
  'redis, node-redis, replicas acknowledged',
]);

const RESTARTED = ['redis', 'redis, restart fence', 'redis, node-redis, restart fence'];

for (const { name, make, redisPrefix } of live.stores)
  modelTest(
    name,
    () => {
      const store = make() as RedisStore;
      const harness: ModelHarness = { store, clock: Date.now, advance: sleep, slack: 2, inclusiveExpiry: true };
      if (!RESTARTED.includes(name) || redisPrefix === undefined) return harness;
      const wipe = () => deleteByPrefix(live.redis, redisPrefix);
      const fence = name.endsWith('restart fence');
      const rearm = async () => {
        await wipe();
        if (fence) await store.initialize();
      };
      return { ...harness, restart: { fence, wipe, rearm } };
    },
    50,
  );

// trpc-idempotency/redis: the Redis store (ioredis `Redis` or `Cluster`; node-redis client, cluster or Sentinel).

export type { IoRedisClient, NodeRedisClient, RedisClient } from './stores/redis/client.js';
export type { ReplicaAcks } from './stores/redis/script-runner.js';
export type { RedisStore, RedisStoreOptions } from './stores/redis/store.js';
export { redisStore } from './stores/redis/store.js';

// trpc-idempotency/redis: the Redis store (ioredis `Redis` or `Cluster`).

export type { RedisStore, RedisStoreOptions } from './stores/redis.js';
export { redisStore } from './stores/redis.js';

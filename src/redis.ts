// trpc-idempotency/redis: the Redis store (ioredis `Redis` or `Cluster`).
export { redisStore } from './stores/redis.js';
export type { RedisStore, RedisStoreOptions } from './stores/redis.js';

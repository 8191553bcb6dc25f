// trpc-idempotency/durable-object: the store on Cloudflare Durable Objects, and the object class a Worker exports.

export type { ShardNamespace, ShardState, ShardStub } from './stores/durable-object/runtime.js';
export { IdempotencyShard } from './stores/durable-object/shard.js';
export type { DurableObjectStore, DurableObjectStoreOptions } from './stores/durable-object/store.js';
export { durableObjectStore } from './stores/durable-object/store.js';

// trpc-idempotency/drizzle: the PostgreSQL store on Drizzle, and its table.
export { drizzleStore } from './stores/drizzle.js';
export type { DrizzleStore, DrizzleStoreOptions, PurgeOptions, TransactionOf } from './stores/drizzle.js';
export { idempotencyKeys } from './stores/drizzle-schema.js';
export type { IdempotencyKeyRow } from './stores/drizzle-schema.js';

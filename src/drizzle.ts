// trpc-idempotency/drizzle: the PostgreSQL store on Drizzle, its table, and the migration helper.

export type { MigrateIdempotencyKeysOptions, MigrateIdempotencyKeysResult } from './stores/drizzle/migrate.js';
export { migrateIdempotencyKeys } from './stores/drizzle/migrate.js';
export type { IdempotencyKeyRow, IdempotencyStepRow } from './stores/drizzle/schema.js';
export { idempotencyKeys, idempotencySteps } from './stores/drizzle/schema.js';
export type { DrizzleStore, DrizzleStoreOptions, PurgeOptions, TransactionOf } from './stores/drizzle/store.js';
export { drizzleStore } from './stores/drizzle/store.js';

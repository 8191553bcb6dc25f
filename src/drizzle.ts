// trpc-idempotency/drizzle: the store on Drizzle (PostgreSQL, MySQL/MariaDB, SQLite), its tables, and the migration helper.

export type { MigrateIdempotencyKeysOptions, MigrateIdempotencyKeysResult } from './stores/drizzle/migrate.js';
export { migrateIdempotencyKeys } from './stores/drizzle/migrate.js';
export type { MysqlIdempotencyKeyRow, MysqlIdempotencyStepRow } from './stores/drizzle/mysql/schema.js';
export { mysqlIdempotencyKeys, mysqlIdempotencySteps } from './stores/drizzle/mysql/schema.js';
export type { MySqlDrizzleStore, MySqlPurgeOptions, MySqlTransactionOf } from './stores/drizzle/mysql/store.js';
export type { IdempotencyKeyRow, IdempotencyStepRow } from './stores/drizzle/schema.js';
export { idempotencyKeys, idempotencySteps } from './stores/drizzle/schema.js';
export type { SqliteIdempotencyKeyRow, SqliteIdempotencyStepRow } from './stores/drizzle/sqlite/schema.js';
export { sqliteIdempotencyKeys, sqliteIdempotencySteps } from './stores/drizzle/sqlite/schema.js';
export type { SQLiteDrizzleStore, SQLitePurgeOptions, SQLiteTransactionOf } from './stores/drizzle/sqlite/store.js';
export type { DrizzleStore, DrizzleStoreOptions, PurgeOptions, TransactionOf } from './stores/drizzle/store.js';
export { drizzleStore } from './stores/drizzle/store.js';

import { sql } from 'drizzle-orm';
import { check, index, integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core';

// The tables of the SQLite store (better-sqlite3, libSQL). Text compares byte
// for byte (SQLite's BINARY collation), so ids, tokens and fingerprints need no
// binary type. Times are whole milliseconds since the epoch (INTEGER), on the
// clock of the machine that runs the statement: Drizzle reads them as Dates.

/**
 * The table of the SQLite store. Export it from your own Drizzle schema to
 * have drizzle-kit manage it with your tables, or apply the migrations shipped
 * in this package's `drizzle/sqlite/` folder (`migrateIdempotencyKeys`).
 *
 * A row is absent once `expires_at` has passed, whatever its state: the next
 * claim takes it over. `purgeExpired()` deletes such rows in batches, through
 * the index on `expires_at`.
 */
export const sqliteIdempotencyKeys = sqliteTable(
  'idempotency_keys',
  {
    /** The record's identity: scope, operation name and client key, escaped. */
    id: text('id').primaryKey(),
    state: text('state', { enum: ['in_progress', 'completed', 'failed'] }).notNull(),
    /** SHA-256 of the operation name and canonical input. */
    fingerprint: text('fingerprint').notNull(),
    /** The fencing token of the claim that wrote the row. */
    token: text('token'),
    /** The serialized outcome, once finished (a body with NUL is kept escaped, as on PostgreSQL). */
    body: text('body'),
    /** Ms since the epoch. */
    expiresAt: integer('expires_at', { mode: 'timestamp_ms' }).notNull(),
    /** When the claim that holds the row (or that stored its outcome) took it, ms since the epoch. */
    createdAt: integer('created_at', { mode: 'timestamp_ms' }).notNull(),
    /** While in progress: the lease (ms) of the claim or of its last renewal; null once finished. */
    lockTtl: integer('lock_ttl'),
  },
  (t) => [
    index('idempotency_keys_expires_at_idx').on(t.expiresAt),
    /** The claims in progress, in id order: what the operator's listing of stuck claims pages through. */
    index('idempotency_keys_in_progress_idx').on(t.id).where(sql`${t.state} = 'in_progress'`),
    check('idempotency_keys_state_check', sql`${t.state} in ('in_progress', 'completed', 'failed')`),
  ],
);

export type SqliteIdempotencyKeyRow = typeof sqliteIdempotencyKeys.$inferSelect;

/**
 * The steps an operation recorded with `step()`, one row each (see the
 * PostgreSQL `idempotencySteps`): they outlive a released or expired claim,
 * live for `ttl` after the last step, and go with the completion that stores
 * the outcome.
 */
export const sqliteIdempotencySteps = sqliteTable(
  'idempotency_steps',
  {
    id: text('id').notNull(),
    /** The step's position in the operation, from 0. */
    seq: integer('seq').notNull(),
    name: text('name').notNull(),
    /** The fingerprint of the request that recorded the step. */
    fingerprint: text('fingerprint').notNull(),
    body: text('body').notNull(),
    /** Ms since the epoch. */
    expiresAt: integer('expires_at', { mode: 'timestamp_ms' }).notNull(),
  },
  (t) => [
    primaryKey({ name: 'idempotency_steps_pkey', columns: [t.id, t.seq] }),
    index('idempotency_steps_expires_at_idx').on(t.expiresAt),
  ],
);

export type SqliteIdempotencyStepRow = typeof sqliteIdempotencySteps.$inferSelect;

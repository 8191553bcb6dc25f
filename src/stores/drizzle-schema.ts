import { sql } from 'drizzle-orm';
import { check, index, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/**
 * The table of the PostgreSQL store. Export it from your own Drizzle schema
 * to have drizzle-kit manage it with your tables, or apply the migrations
 * shipped in this package's `drizzle/` folder.
 *
 * A row is absent once `expires_at` has passed, whatever its state: the store
 * ignores it and the next claim takes it over. `purgeExpired()` deletes such
 * rows in small batches, using the index on `expires_at`.
 */
export const idempotencyKeys = pgTable(
  'idempotency_keys',
  {
    /** The record's identity: scope, operation name and client key, escaped. */
    id: text('id').primaryKey(),
    state: text('state', { enum: ['in_progress', 'completed', 'failed'] }).notNull(),
    /** SHA-256 of the operation name and canonical input. */
    fingerprint: text('fingerprint').notNull(),
    /** The fencing token of the claim that wrote the row. */
    token: text('token'),
    /** The serialized outcome, once finished. */
    body: text('body'),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    index('idempotency_keys_expires_at_idx').on(t.expiresAt),
    check('idempotency_keys_state_check', sql`${t.state} in ('in_progress', 'completed', 'failed')`),
  ],
);

export type IdempotencyKeyRow = typeof idempotencyKeys.$inferSelect;

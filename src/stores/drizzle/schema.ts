import { sql } from 'drizzle-orm';
import { check, index, integer, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';

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
    /** When the claim that holds the row (or that stored its outcome) took it. */
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    /**
     * While in progress: the lease (ms) its holder asked for at the claim or
     * the last renewal, so `expires_at - lock_ttl` is when it was last renewed.
     * Null once finished, and on rows written before migration 0002.
     */
    lockTtl: integer('lock_ttl'),
  },
  (t) => [
    index('idempotency_keys_expires_at_idx').on(t.expiresAt),
    /** The claims in progress, in id order: what the operator's listing of stuck claims pages through. */
    index('idempotency_keys_in_progress_idx').on(t.id).where(sql`${t.state} = 'in_progress'`),
    check('idempotency_keys_state_check', sql`${t.state} in ('in_progress', 'completed', 'failed')`),
  ],
);

export type IdempotencyKeyRow = typeof idempotencyKeys.$inferSelect;

/**
 * The steps an operation recorded with `step()`, one row each, apart from
 * its row in `idempotency_keys`: they outlive a released or expired claim,
 * so the retry that takes the key over resumes after them. They live for
 * `ttl` after the last step, and the completion that stores the operation's
 * outcome deletes them. `purgeExpired()` deletes expired ones too.
 */
export const idempotencySteps = pgTable(
  'idempotency_steps',
  {
    /** The record's id, as in `idempotency_keys`. */
    id: text('id').notNull(),
    /** The step's position in the operation, from 0. */
    seq: integer('seq').notNull(),
    name: text('name').notNull(),
    /** The fingerprint of the request that recorded the step. */
    fingerprint: text('fingerprint').notNull(),
    /** The step's serialized result. */
    body: text('body').notNull(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
  },
  (t) => [
    primaryKey({ name: 'idempotency_steps_pkey', columns: [t.id, t.seq] }),
    index('idempotency_steps_expires_at_idx').on(t.expiresAt),
  ],
);

export type IdempotencyStepRow = typeof idempotencySteps.$inferSelect;

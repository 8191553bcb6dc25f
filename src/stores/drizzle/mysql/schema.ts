import { sql } from 'drizzle-orm';
import {
  check,
  customType,
  datetime,
  index,
  int,
  mysqlTable,
  primaryKey,
  varbinary,
  varchar,
} from 'drizzle-orm/mysql-core';

// The tables of the MySQL/MariaDB store. Identities, tokens, fingerprints and
// names are binary strings, compared byte for byte: MySQL's text collations
// fold case and (PAD SPACE) ignore trailing spaces, so 'k' and 'K ' would be one
// record. Bodies are bytes (UTF-8) too, whatever the table's character set.

/** A LONGBLOB: a body of any size the server's max_allowed_packet lets through. */
const longblob = customType<{ data: Buffer; driverData: Buffer }>({ dataType: () => 'longblob' });
/** A BLOB (64 KiB), for a step's name. */
const blob = customType<{ data: Buffer; driverData: Buffer }>({ dataType: () => 'blob' });

/**
 * The longest record id, in bytes: with the step's position, the steps' primary key stays within
 * InnoDB's 3072-byte limit on an index.
 */
export const MAX_ID_BYTES = 3000;

/**
 * The table of the MySQL/MariaDB store. Export it from your own Drizzle schema
 * to have drizzle-kit manage it with your tables, or apply the migrations
 * shipped in this package's `drizzle/mysql/` folder (`migrateIdempotencyKeys`).
 *
 * A row is absent once `expires_at` (UTC, the server's `UTC_TIMESTAMP(3)`) has
 * passed, whatever its state: the next claim takes it over. `purgeExpired()`
 * deletes such rows in batches, through the index on `expires_at`.
 */
export const mysqlIdempotencyKeys = mysqlTable(
  'idempotency_keys',
  {
    /** The record's identity: scope, operation name and client key, escaped (UTF-8). */
    id: varbinary('id', { length: MAX_ID_BYTES }).primaryKey(),
    state: varchar('state', { length: 16, enum: ['in_progress', 'completed', 'failed'] }).notNull(),
    /** SHA-256 of the operation name and canonical input. */
    fingerprint: varbinary('fingerprint', { length: 255 }).notNull(),
    /** The fencing token of the claim that wrote the row. */
    token: varbinary('token', { length: 255 }),
    /** The serialized outcome (UTF-8), once finished. */
    body: longblob('body'),
    /** UTC. */
    expiresAt: datetime('expires_at', { fsp: 3 }).notNull(),
    /** When the claim that holds the row (or that stored its outcome) took it, UTC. */
    createdAt: datetime('created_at', { fsp: 3 }).notNull(),
    /** While in progress: the lease (ms) of the claim or of its last renewal; null once finished. */
    lockTtl: int('lock_ttl'),
  },
  (t) => [
    index('idempotency_keys_expires_at_idx').on(t.expiresAt),
    /** The claims in progress, in id order (InnoDB appends the primary key to every index): the operator's listing. */
    index('idempotency_keys_state_idx').on(t.state),
    check('idempotency_keys_state_check', sql`${t.state} in ('in_progress', 'completed', 'failed')`),
  ],
);

export type MysqlIdempotencyKeyRow = typeof mysqlIdempotencyKeys.$inferSelect;

/**
 * The steps an operation recorded with `step()`, one row each (see the
 * PostgreSQL `idempotencySteps`): they outlive a released or expired claim,
 * live for `ttl` after the last step, and go with the completion that stores
 * the outcome.
 */
export const mysqlIdempotencySteps = mysqlTable(
  'idempotency_steps',
  {
    id: varbinary('id', { length: MAX_ID_BYTES }).notNull(),
    /** The step's position in the operation, from 0. */
    seq: int('seq').notNull(),
    name: blob('name').notNull(),
    /** The fingerprint of the request that recorded the step. */
    fingerprint: varbinary('fingerprint', { length: 255 }).notNull(),
    body: longblob('body').notNull(),
    /** UTC. */
    expiresAt: datetime('expires_at', { fsp: 3 }).notNull(),
  },
  (t) => [
    primaryKey({ name: 'idempotency_steps_pkey', columns: [t.id, t.seq] }),
    index('idempotency_steps_expires_at_idx').on(t.expiresAt),
  ],
);

export type MysqlIdempotencyStepRow = typeof mysqlIdempotencySteps.$inferSelect;

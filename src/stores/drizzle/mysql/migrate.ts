import { is, sql } from 'drizzle-orm';
import { MySqlTransaction } from 'drizzle-orm/mysql-core';
import { IdempotencyConfigError } from '../../../core/idempotency-error.js';
import { BREAKPOINT, folderMigrations, journalOptions, pending } from '../journal.js';
import type { MigrateIdempotencyKeysOptions, MigrateIdempotencyKeysResult } from '../migrate.js';
import { MYSQL_MIGRATIONS } from './embedded-migrations.js';
import type { AnyMySqlDatabase } from './store.js';

// migrateIdempotencyKeys on a MySQL/MariaDB database: the migrations of
// drizzle/mysql/, carried in the code, under a named lock.

/**
 * The named lock every caller holds while it reads the journal and applies
 * what is missing (GET_LOCK: one per server, held by the connection). DDL
 * commits implicitly in MySQL, so no transaction could do what PostgreSQL's
 * advisory lock in one transaction does; the lock orders the callers instead.
 */
const LOCK_NAME = 'trpc_idempotency_migrations';
const LOCK_WAIT_SECONDS = 60;
// MySQL and MariaDB refuse identifiers longer than 64 characters.
const MAX_IDENTIFIER_LENGTH = 64;

const rowsOf = (result: unknown): Record<string, unknown>[] => {
  const first = Array.isArray(result) ? result[0] : (result as { rows?: unknown } | null)?.rows;
  return Array.isArray(first) ? (first as Record<string, unknown>[]) : [];
};

/**
 * migrateIdempotencyKeys for MySQL and MariaDB (see its documentation): the
 * journal (Drizzle's MySQL migrator's format: `id serial`, `hash text`,
 * `created_at bigint`) in the connection's database, one caller at a time
 * under GET_LOCK('trpc_idempotency_migrations'). On a pool it runs on one
 * connection (in a transaction, which the DDL commits).
 */
export async function migrateMysql(
  db: AnyMySqlDatabase,
  options: MigrateIdempotencyKeysOptions,
): Promise<MigrateIdempotencyKeysResult> {
  if (is(db, MySqlTransaction)) {
    throw new IdempotencyConfigError(
      'migrateIdempotencyKeys: pass the database (drizzle(pool)), not a transaction: MySQL commits each table it creates, whatever transaction is open.',
    );
  }
  const { table, migrationsFolder } = journalOptions(options, {
    dialect: 'MySQL',
    maxLength: MAX_IDENTIFIER_LENGTH,
    folder: 'drizzle/mysql',
  });
  const migrations =
    migrationsFolder === undefined
      ? MYSQL_MIGRATIONS.map((m) => ({ tag: m.tag, when: m.when, hash: m.hash, statements: m.sql.split(BREAKPOINT) }))
      : await folderMigrations(migrationsFolder, MYSQL_MIGRATIONS);
  const journal = sql.identifier(table);
  const journalName = `\`${table.replaceAll('`', '``')}\``;

  return db.transaction(async (tx) => {
    const [locked] = rowsOf(await tx.execute(sql`select get_lock(${LOCK_NAME}, ${LOCK_WAIT_SECONDS}) as locked`));
    if (Number(locked?.locked) !== 1) {
      throw new Error(
        `migrateIdempotencyKeys: another caller held the lock '${LOCK_NAME}' for ${LOCK_WAIT_SECONDS} s (see performance_schema.metadata_locks or SELECT IS_USED_LOCK('${LOCK_NAME}')).`,
      );
    }
    try {
      await tx.execute(
        sql`create table if not exists ${journal} (id serial primary key, hash text not null, created_at bigint)`,
      );
      // A locking read: it sees the latest commit whatever the transaction's snapshot.
      const rows = rowsOf(
        await tx.execute(sql`select id, hash, created_at from ${journal} order by id lock in share mode`),
      );
      let applied = 0;
      for (const migration of pending(migrations, rows, journalName)) {
        for (const statement of migration.statements) {
          if (statement.trim() !== '') await tx.execute(sql.raw(statement));
        }
        await tx.execute(sql`insert into ${journal} (hash, created_at) values (${migration.hash}, ${migration.when})`);
        applied++;
      }
      return { applied };
    } finally {
      await tx.execute(sql`select release_lock(${LOCK_NAME})`);
    }
  });
}

import { is, type SQL, sql } from 'drizzle-orm';
import { type BaseSQLiteDatabase, SQLiteTransaction } from 'drizzle-orm/sqlite-core';
import { IdempotencyConfigError } from '../../../core/idempotency-error.js';
import { BREAKPOINT, folderMigrations, journalOptions, pending } from '../journal.js';
import type { MigrateIdempotencyKeysOptions, MigrateIdempotencyKeysResult } from '../migrate.js';
import { SQLITE_MIGRATIONS } from './embedded-migrations.js';
import type { AnySQLiteDatabase } from './store.js';

// migrateIdempotencyKeys on a SQLite database: the migrations of drizzle/sqlite/,
// carried in the code, in one write transaction.

/** A statement of the migration: a read whose rows it needs, or a write. */
type Step = ['all' | 'run', SQL];

/** What the migration runs, one statement at a time: a generator, so that one text serves sync and async drivers. */
function* migration(
  table: string,
  migrations: Awaited<ReturnType<typeof folderMigrations>>,
): Generator<Step, MigrateIdempotencyKeysResult, unknown> {
  const journal = sql.identifier(table);
  yield [
    'run',
    sql`create table if not exists ${journal} (id integer primary key, hash text not null, created_at numeric)`,
  ];
  const rows = (yield ['all', sql`select id, hash, created_at from ${journal} order by id`]) as Record<
    string,
    unknown
  >[];
  let applied = 0;
  for (const m of pending(migrations, rows, `"${table.replaceAll('"', '""')}"`)) {
    for (const statement of m.statements) {
      if (statement.trim() !== '') yield ['run', sql.raw(statement)];
    }
    yield ['run', sql`insert into ${journal} (hash, created_at) values (${m.hash}, ${m.when})`];
    applied++;
  }
  return { applied };
}

/**
 * migrateIdempotencyKeys for SQLite (see its documentation): the journal
 * (Drizzle's SQLite migrator's format) in the database, read and written in
 * one transaction that takes the write lock first (BEGIN IMMEDIATE on
 * better-sqlite3; libSQL's write transactions): processes that start together
 * on one file apply the migrations once, the others wait (busy_timeout) and
 * then find them applied. SQLite's DDL is transactional: a failure applies nothing.
 */
export async function migrateSqlite(
  db: AnySQLiteDatabase,
  options: MigrateIdempotencyKeysOptions,
): Promise<MigrateIdempotencyKeysResult> {
  if (is(db, SQLiteTransaction)) {
    throw new IdempotencyConfigError(
      'migrateIdempotencyKeys: pass the database (drizzle(sqlite)), not a transaction: it runs a write transaction of its own.',
    );
  }
  const { table, migrationsFolder } = journalOptions(options, {
    dialect: 'SQLite',
    maxLength: 128,
    folder: 'drizzle/sqlite',
  });
  const migrations =
    migrationsFolder === undefined
      ? SQLITE_MIGRATIONS.map((m) => ({ tag: m.tag, when: m.when, hash: m.hash, statements: m.sql.split(BREAKPOINT) }))
      : await folderMigrations(migrationsFolder, SQLITE_MIGRATIONS);
  const steps = migration(table, migrations);
  if ((db as unknown as { resultKind?: unknown }).resultKind === 'sync') {
    // better-sqlite3: a synchronous transaction, every statement run in it before it returns.
    return (db as unknown as BaseSQLiteDatabase<'sync', unknown>).transaction(
      (tx) => {
        let step = steps.next();
        while (!step.done) step = steps.next(tx[step.value[0]](step.value[1]));
        return step.value;
      },
      { behavior: 'immediate' },
    ) as MigrateIdempotencyKeysResult;
  }
  return db.transaction(
    async (tx) => {
      let step = steps.next();
      while (!step.done) step = steps.next(await tx[step.value[0]](step.value[1]));
      return step.value;
    },
    { behavior: 'immediate' },
  );
}

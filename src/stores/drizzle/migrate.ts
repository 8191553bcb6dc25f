import { is, sql } from 'drizzle-orm';
import { PgDatabase, type PgQueryResultHKT, PgTransaction } from 'drizzle-orm/pg-core';
import { IdempotencyConfigError } from '../../core/idempotency-error.js';
import { describeValue } from '../../core/options.js';
import { PACKAGE_MIGRATIONS } from './embedded-migrations.js';
import { BREAKPOINT, folderMigrations, pending } from './journal.js';
import { migrateMysql } from './mysql/migrate.js';
import { type AnyMySqlDatabase, isMySqlDatabase } from './mysql/store.js';
import { migrateSqlite } from './sqlite/migrate.js';
import { type AnySQLiteDatabase, isSQLiteDatabase } from './sqlite/store.js';
import { rowsOf } from './statements.js';

type AnyPgDatabase = PgDatabase<PgQueryResultHKT, any, any>;

export interface MigrateIdempotencyKeysOptions {
  /**
   * A folder to read this package's migrations from instead of the code, as
   * drizzle-kit writes it (`meta/_journal.json` and one SQL file per entry):
   * `node_modules/trpc-idempotency/drizzle`, of this version or a later one.
   * It must begin with this version's migrations, unchanged (same tags,
   * `when` and SQL); later entries are applied after them. Any other folder
   * (your application's own `drizzle/`) is refused. A relative path is taken
   * from the working directory, as Drizzle's migrator does.
   * @default the migrations carried in this package's code (the same as its `drizzle/` folder)
   */
  migrationsFolder?: string | URL;
  /**
   * The schema of the migrations journal. It is created if missing.
   * Drizzle's migrator has the same default, so a database migrated with it is recognised.
   * @default 'drizzle'
   */
  migrationsSchema?: string;
  /**
   * The table of the migrations journal: keep it apart from your application's
   * `__drizzle_migrations`. It holds only this package's migrations.
   * @default '__trpc_idempotency_migrations'
   */
  migrationsTable?: string;
}

export interface MigrateIdempotencyKeysResult {
  /** How many migrations this call applied (0 when the database was up to date). */
  applied: number;
}

/**
 * The advisory lock every caller takes, in its transaction, before it reads
 * the journal: the bytes of "trpcidem" as a bigint (0x747270636964656d). It is
 * one lock per database, whatever the journal's schema and table. In
 * `pg_locks` it shows as `locktype = 'advisory'`, `classid = 1953656931`,
 * `objid = 1768187245`, `objsubid = 1`.
 */
const LOCK_KEY = '8390892628016915821';

export const OPTION_NAMES = ['migrationsFolder', 'migrationsSchema', 'migrationsTable'] as const;

// PostgreSQL truncates longer identifiers (NAMEDATALEN - 1), so two long names could silently meet.
const MAX_IDENTIFIER_BYTES = 63;

function identifier(name: 'migrationsSchema' | 'migrationsTable', value: unknown, fallback: string): string {
  if (value === undefined) return fallback;
  const bytes = typeof value === 'string' ? Buffer.byteLength(value, 'utf8') : 0;
  if (typeof value !== 'string' || value.length === 0 || value.includes('\0') || bytes > MAX_IDENTIFIER_BYTES) {
    const got = bytes > MAX_IDENTIFIER_BYTES ? `a name of ${bytes} bytes` : describeValue(value);
    throw new IdempotencyConfigError(
      `migrateIdempotencyKeys: \`${name}\` must be a non-empty name without NUL characters, of at most ${MAX_IDENTIFIER_BYTES} bytes (PostgreSQL truncates longer ones), got ${got}. Leave it out to use '${fallback}'.`,
    );
  }
  return value;
}

/** A journal's name as SQL writes it, for messages. */
const quoted = (name: string): string => `"${name.replaceAll('"', '""')}"`;

/**
 * Creates or updates the `idempotency_keys` table with this package's
 * migrations, carried in its code; call it at startup, before the first
 * request. It reads no folder unless you pass `migrationsFolder`, so a bundle
 * applies the same migrations as the installed package, never your
 * application's. Safe when several replicas start together: every caller
 * takes one PostgreSQL advisory lock
 * (`pg_advisory_xact_lock(8390892628016915821)`, one per database) in a
 * transaction at READ COMMITTED (whatever `default_transaction_isolation`
 * says) that creates the journal, reads it, applies the missing migrations
 * and records them: one applies them, the others then find them applied.
 * Drizzle's own `migrate()` takes no lock and fails on a fresh database when
 * several run at once.
 *
 * The journal has the format of Drizzle's migrator (`id serial`, `hash text`,
 * `created_at bigint`, a migration recorded as the SHA-256 of its file and its
 * `when`), so a database migrated by `migrate(db, { migrationsFolder:
 * 'node_modules/trpc-idempotency/drizzle', migrationsTable:
 * '__trpc_idempotency_migrations' })` is recognised and not migrated twice, and
 * the other way round. It applies the package's migrations after the last one
 * it records. It holds only this package's migrations: a row of any other
 * (versions up to 0.2.0 could record an application's there) is reported with
 * `IdempotencyConfigError`, and nothing is applied, unless it comes after all
 * of this version's, as a later version's migration would after a rollback.
 * The table is created in the first schema of the connection's `search_path`.
 *
 * Works on any Drizzle PostgreSQL database with interactive transactions
 * (node-postgres, postgres-js, PGlite...), on MySQL/MariaDB (drizzle/mysql/,
 * under a named lock) and on SQLite (drizzle/sqlite/, in one write
 * transaction). Pass the database, not a transaction.
 *
 * @example
 * import { migrateIdempotencyKeys } from 'trpc-idempotency/drizzle';
 * await migrateIdempotencyKeys(db);
 *
 * @throws IdempotencyConfigError for a bad `db` or option, a `migrationsFolder`
 * that is not this package's, or a journal that holds other migrations.
 */
export async function migrateIdempotencyKeys(
  db: AnyPgDatabase | AnyMySqlDatabase | AnySQLiteDatabase,
  options: MigrateIdempotencyKeysOptions = {},
): Promise<MigrateIdempotencyKeysResult> {
  if (isMySqlDatabase(db)) return migrateMysql(db, options);
  if (isSQLiteDatabase(db)) return migrateSqlite(db, options);
  if (is(db, PgTransaction)) {
    // A nested transaction is a savepoint: it cannot set its isolation level, and the lock would outlive it.
    throw new IdempotencyConfigError(
      'migrateIdempotencyKeys: pass the database (drizzle(pool), drizzle(pglite), ...), not a transaction: it runs a transaction of its own, at READ COMMITTED.',
    );
  }
  if (!is(db, PgDatabase)) {
    throw new IdempotencyConfigError(
      'migrateIdempotencyKeys: `db` must be a Drizzle PostgreSQL database (drizzle(pool), drizzle(pglite), ...), MySQL database (drizzle(mysql2Pool)) or SQLite database (drizzle(betterSqlite3), drizzle(libsqlClient)).',
    );
  }
  if (options === null || typeof options !== 'object') {
    throw new IdempotencyConfigError(
      `migrateIdempotencyKeys: \`options\` must be an object, got ${describeValue(options)}.`,
    );
  }
  // A misspelt option would otherwise be ignored and the defaults used: a second journal, and the table created twice.
  const unknown = Object.keys(options).filter((key) => !(OPTION_NAMES as readonly string[]).includes(key));
  if (unknown.length > 0) {
    throw new IdempotencyConfigError(
      `migrateIdempotencyKeys: unknown option${unknown.length > 1 ? 's' : ''} ${unknown.map((k) => `\`${k}\``).join(', ')}; the options are ${OPTION_NAMES.map((k) => `\`${k}\``).join(', ')}.`,
    );
  }
  const schema = identifier('migrationsSchema', options.migrationsSchema, 'drizzle');
  const table = identifier('migrationsTable', options.migrationsTable, '__trpc_idempotency_migrations');
  const { migrationsFolder } = options;
  if (
    migrationsFolder !== undefined &&
    !(typeof migrationsFolder === 'string' && migrationsFolder.length > 0) &&
    !(migrationsFolder instanceof URL && migrationsFolder.protocol === 'file:')
  ) {
    throw new IdempotencyConfigError(
      `migrateIdempotencyKeys: \`migrationsFolder\` must be a path or a file: URL, got ${describeValue(migrationsFolder)}. Leave it out to apply the migrations carried in this package's code.`,
    );
  }

  const migrations =
    migrationsFolder === undefined
      ? PACKAGE_MIGRATIONS.map((m) => ({ tag: m.tag, when: m.when, hash: m.hash, statements: m.sql.split(BREAKPOINT) }))
      : await folderMigrations(migrationsFolder, PACKAGE_MIGRATIONS);
  const journal = sql`${sql.identifier(schema)}.${sql.identifier(table)}`;
  const journalName = `${quoted(schema)}.${quoted(table)}`;

  return db.transaction(
    async (tx) => {
      // Every caller queues here; the winner's commit releases the next one.
      const [session] = rowsOf(
        await tx.execute(
          sql`select pg_advisory_xact_lock(${sql.raw(LOCK_KEY)}::bigint), current_setting('transaction_isolation') as isolation`,
        ),
      );
      // Above READ COMMITTED the snapshot predates the lock: a waiter would miss the winner's journal rows and apply them again.
      if (session?.isolation !== 'read committed') {
        throw new Error(
          `migrateIdempotencyKeys: the transaction runs at ${String(session?.isolation)}, not READ COMMITTED; this driver ignored the isolation level.`,
        );
      }
      // Create only what is missing: CREATE ... IF NOT EXISTS still needs the CREATE privilege when the object exists.
      const [existing] = rowsOf(
        await tx.execute(sql`select to_regnamespace(format('%I', ${schema}::text)) is not null as has_schema,
                                    to_regclass(format('%I.%I', ${schema}::text, ${table}::text)) is not null as has_journal`),
      );
      if (existing?.has_schema !== true) await tx.execute(sql`create schema if not exists ${sql.identifier(schema)}`);
      if (existing?.has_journal !== true) {
        await tx.execute(
          sql`create table if not exists ${journal} (id serial primary key, hash text not null, created_at bigint)`,
        );
      }
      const rows = rowsOf(await tx.execute(sql`select id, hash, created_at from ${journal} order by id`));
      let applied = 0;
      for (const migration of pending(migrations, rows, journalName)) {
        for (const statement of migration.statements) {
          if (statement.trim() !== '') await tx.execute(sql.raw(statement));
        }
        await tx.execute(sql`insert into ${journal} (hash, created_at) values (${migration.hash}, ${migration.when})`);
        applied++;
      }
      return { applied };
    },
    { isolationLevel: 'read committed' },
  );
}

import { is, sql } from 'drizzle-orm';
import { PgDatabase, type PgQueryResultHKT, PgTransaction } from 'drizzle-orm/pg-core';
import { IdempotencyConfigError } from '../core/errors.js';
import { describeValue } from '../core/options.js';
import { rowsOf } from './drizzle-statements.js';

type AnyPgDatabase = PgDatabase<PgQueryResultHKT, any, any>;

function moduleUrl(): string {
  // biome-ignore lint/suspicious/noTsIgnore: an error in the CommonJS build only, so @ts-expect-error fails the ESM one
  // @ts-ignore ESM-only syntax: the CommonJS build (scripts/build.mjs) gives the URL from __filename instead
  return import.meta.url;
}

/**
 * This package's drizzle/ folder: the first one with a journal above this
 * module (src/stores/, dist/stores/ and dist/cjs/stores/ sit at different depths).
 */
function packageMigrations(
  modulePath: string,
  exists: (path: string) => boolean,
  join: (...parts: string[]) => string,
): string {
  let dir = join(modulePath, '..');
  for (let up = 0; up < 4; up++, dir = join(dir, '..')) {
    const folder = join(dir, 'drizzle');
    if (exists(join(folder, 'meta', '_journal.json')) && exists(join(dir, 'package.json'))) return folder;
  }
  return join(modulePath, '..', '..', '..', 'drizzle');
}

export interface MigrateIdempotencyKeysOptions {
  /**
   * The folder of migrations to apply, as drizzle-kit writes it (with
   * `meta/_journal.json`). Set it when a bundler has moved this module away
   * from the package, since the default is found relative to the module. A
   * relative path is taken from the working directory, as Drizzle's migrator does.
   * @default the `drizzle/` folder shipped in this package (`node_modules/trpc-idempotency/drizzle`)
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
   * `__drizzle_migrations`, whose timestamps would hide this package's migrations.
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

const OPTION_NAMES = ['migrationsFolder', 'migrationsSchema', 'migrationsTable'] as const;

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

/**
 * Creates or updates the `idempotency_keys` table with this package's
 * migrations; call it at startup, before the first request. Safe when several
 * replicas start together: every caller takes one PostgreSQL advisory lock
 * (`pg_advisory_xact_lock(8390892628016915821)`, one per database) in a
 * transaction at READ COMMITTED (whatever `default_transaction_isolation`
 * says) that creates the journal, reads it, applies the missing migrations
 * and records them: one applies them, the others then find them applied.
 * Drizzle's own `migrate()` takes no lock and fails on a fresh database when
 * several run at once.
 *
 * The journal has the format of Drizzle's migrator (`id serial`, `hash text`,
 * `created_at bigint`) and the same rule (apply what is newer than the last
 * row), so a database migrated by `migrate(db, { migrationsFolder, migrationsTable:
 * '__trpc_idempotency_migrations' })` is recognised and not migrated twice.
 * The table is created in the first schema of the connection's `search_path`.
 *
 * Works on any Drizzle PostgreSQL database with interactive transactions
 * (node-postgres, postgres-js, PGlite...). Pass the database, not a
 * transaction.
 *
 * @example
 * import { migrateIdempotencyKeys } from 'trpc-idempotency/drizzle';
 * await migrateIdempotencyKeys(db);
 *
 * @throws IdempotencyConfigError for a bad `db` or option, or a folder without migrations.
 */
export async function migrateIdempotencyKeys(
  db: AnyPgDatabase,
  options: MigrateIdempotencyKeysOptions = {},
): Promise<MigrateIdempotencyKeysResult> {
  if (is(db, PgTransaction)) {
    // A nested transaction is a savepoint: it cannot set its isolation level, and the lock would outlive it.
    throw new IdempotencyConfigError(
      'migrateIdempotencyKeys: pass the database (drizzle(pool), drizzle(pglite), ...), not a transaction: it runs a transaction of its own, at READ COMMITTED.',
    );
  }
  if (!is(db, PgDatabase)) {
    throw new IdempotencyConfigError(
      'migrateIdempotencyKeys: `db` must be a Drizzle PostgreSQL database (drizzle(pool), drizzle(pglite), ...).',
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
  const given = migrationsFolder !== undefined;
  if (
    given &&
    !(typeof migrationsFolder === 'string' && migrationsFolder.length > 0) &&
    !(migrationsFolder instanceof URL && migrationsFolder.protocol === 'file:')
  ) {
    throw new IdempotencyConfigError(
      `migrateIdempotencyKeys: \`migrationsFolder\` must be a path or a file: URL, got ${describeValue(migrationsFolder)}. Leave it out to use this package's drizzle/ folder.`,
    );
  }

  // Node-only modules are loaded here, not at the top: the store in this entry also runs where there is no file system.
  const [{ existsSync }, { join }, { fileURLToPath }, { readMigrationFiles }] = await Promise.all([
    import('node:fs'),
    import('node:path'),
    import('node:url'),
    import('drizzle-orm/migrator'),
  ]);
  const source = migrationsFolder ?? packageMigrations(fileURLToPath(moduleUrl()), existsSync, join);
  const folder = typeof source === 'string' ? source : fileURLToPath(source);
  if (!existsSync(join(folder, 'meta', '_journal.json'))) {
    throw new IdempotencyConfigError(
      given
        ? `migrateIdempotencyKeys: ${folder} holds no migrations (meta/_journal.json is missing). Point \`migrationsFolder\` at trpc-idempotency's drizzle/ folder, or leave it out.`
        : `migrateIdempotencyKeys: this package's migrations were not found at ${folder} (a bundler may have moved this module). Pass \`migrationsFolder\`: the path of node_modules/trpc-idempotency/drizzle.`,
    );
  }
  const migrations = readMigrationFiles({ migrationsFolder: folder });
  const journal = sql`${sql.identifier(schema)}.${sql.identifier(table)}`;

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
      // Drizzle's rule: apply each migration newer than the last recorded one.
      const [last] = rowsOf(
        await tx.execute(sql`select created_at from ${journal} order by created_at desc nulls last limit 1`),
      );
      const lastMillis = last === undefined || last.created_at === null ? undefined : Number(last.created_at);
      let applied = 0;
      for (const migration of migrations) {
        if (lastMillis !== undefined && lastMillis >= migration.folderMillis) continue;
        for (const statement of migration.sql) {
          if (statement.trim() !== '') await tx.execute(sql.raw(statement));
        }
        await tx.execute(
          sql`insert into ${journal} (hash, created_at) values (${migration.hash}, ${migration.folderMillis})`,
        );
        applied++;
      }
      return { applied };
    },
    { isolationLevel: 'read committed' },
  );
}

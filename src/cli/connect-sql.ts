/**
 * Connecting the CLI to a SQL database, with drizzleStore on the driver the
 * application uses: PostgreSQL (pg), MySQL/MariaDB (mysql2) and SQLite
 * (better-sqlite3, else @libsql/client). Every command but migrate first
 * checks that the idempotency_keys table is there, and says where it looked.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { IdempotencyStore } from '../core/store.js';
import {
  CONNECT_TIMEOUT,
  type Connection,
  installed,
  type MysqlTarget,
  type PostgresTarget,
  peer,
  redact,
  type SqliteTarget,
  type SqlTarget,
  unreachable,
} from './connect.js';
import { CliError, EXIT } from './exit-codes.js';

/** How long a SQLite write waits for another connection's lock (ms): better-sqlite3's default, set on libSQL too. */
const SQLITE_BUSY_TIMEOUT = 5_000;

export interface SqlConnection extends Connection {
  store: IdempotencyStore & { purgeExpired(options?: { batchSize?: number; maxBatches?: number }): Promise<number> };
  /** The Drizzle database, for migrations. */
  db: unknown;
  /** Runs one SQL query on the connection. */
  query(text: string): Promise<Record<string, unknown>[]>;
}

const MIGRATE = '`trpc-idempotency migrate`';

/** Connects to the target's database and makes the store on it; with `table`, checks that the table is there. */
export function connectSql(target: SqlTarget, table: boolean): Promise<SqlConnection> {
  if (target.kind === 'mysql') return connectMysql(target, table);
  if (target.kind === 'sqlite') return connectSqlite(target, table);
  return connectPostgres(target, table);
}

/** The store on `db`, with the connection's query and close; closed again when `check` (the table's) throws. */
async function opened(
  db: unknown,
  where: string,
  query: SqlConnection['query'],
  close: () => Promise<void>,
  check: () => Promise<void>,
): Promise<SqlConnection> {
  try {
    await check();
  } catch (error) {
    await close();
    throw error;
  }
  const { drizzleStore } = await import('../stores/drizzle/store.js');
  const store = drizzleStore({ db: db as Parameters<typeof drizzleStore>[0]['db'] }) as SqlConnection['store'];
  return { store, db, query, where, close };
}

/** A schema name as the search_path setting reads it: quoted, with the spaces escaped for the startup options. */
const searchPathOption = (schema: string) =>
  `-c search_path=${`"${schema.replaceAll('"', '""')}"`.replace(/[\\ ]/g, '\\$&')}`;

/**
 * Connects to PostgreSQL through pg and drizzle-orm/node-postgres, and makes
 * the store on it. With `table`, checks that the idempotency_keys table is
 * on the search_path (every command but migrate).
 */
async function connectPostgres(target: PostgresTarget, table: boolean): Promise<SqlConnection> {
  const pgModule = await peer('pg', () => import('pg'), '--database-url');
  // pg is CommonJS: its exports are the default export of the ESM import
  const pg = (pgModule as unknown as { default?: typeof pgModule }).default ?? pgModule;
  const { drizzle } = await peer('drizzle-orm', () => import('drizzle-orm/node-postgres'), '--database-url');
  const where = redact(target.url) + (target.schema === undefined ? '' : `, schema ${target.schema}`);
  const pool = new pg.Pool({
    connectionString: target.url,
    max: 2,
    connectionTimeoutMillis: CONNECT_TIMEOUT,
    // an operator's command waits at most this long on a statement or a row lock, never forever
    statement_timeout: 30_000,
    lock_timeout: 10_000,
    ...(target.schema === undefined ? {} : { options: searchPathOption(target.schema) }),
  });
  pool.on('error', () => {});
  const query = async (text: string) => (await pool.query(text)).rows as Record<string, unknown>[];
  const close = () => pool.end().catch(() => {});
  try {
    await query('select 1');
  } catch (error) {
    await close();
    throw unreachable('PostgreSQL', redact(target.url), error);
  }
  return opened(drizzle(pool), where, query, close, async () => {
    if (!table) return;
    const [row] = await query(
      "select to_regclass('idempotency_keys') is not null as found, current_schema() as schema",
    );
    if (row?.found !== true) {
      const at = target.schema ?? (row?.schema === null ? "the server's search_path (no schema)" : String(row?.schema));
      throw new CliError(
        `PostgreSQL at ${redact(target.url)} has no idempotency_keys table in ${at}: pass the application's --schema, or create it with ${MIGRATE}.`,
        EXIT.failure,
      );
    }
  });
}

/** MySQL's error for a database that does not exist (ER_BAD_DB_ERROR). */
const UNKNOWN_DATABASE = 1049;

/** How long an operator's command waits for a row lock on MySQL (s): as on PostgreSQL, not InnoDB's default 50. */
export const MYSQL_LOCK_WAIT_TIMEOUT = 10;

/**
 * Connects to MySQL or MariaDB through mysql2 (a pool of 2) and
 * drizzle-orm/mysql2. With `table`, checks that the URL's database has the
 * idempotency_keys table (every command but migrate).
 */
async function connectMysql(target: MysqlTarget, table: boolean): Promise<SqlConnection> {
  const mysqlModule = await peer('mysql2', () => import('mysql2/promise'), '--database-url mysql://');
  const mysql = (mysqlModule as unknown as { default?: typeof mysqlModule }).default ?? mysqlModule;
  const { drizzle } = await peer('drizzle-orm', () => import('drizzle-orm/mysql2'), '--database-url');
  const where = redact(target.url);
  const pool = mysql.createPool({ uri: target.url, connectionLimit: 2, connectTimeout: CONNECT_TIMEOUT });
  // Each connection of the pool waits MYSQL_LOCK_WAIT_TIMEOUT for a row lock, never InnoDB's default 50 s. The
  // promise pool's 'connection' event hands mysql2's callback connection (typed as the promise one): its SET is
  // queued on the connection before the pool gives it to the first statement.
  pool.on('connection', (connection) => {
    (connection as unknown as { query(sql: string, done: (error: unknown) => void): void }).query(
      `SET SESSION innodb_lock_wait_timeout = ${MYSQL_LOCK_WAIT_TIMEOUT}`,
      () => {}, // a server without the setting keeps its own; the command's statements say what fails
    );
  });
  const query = async (text: string) => (await pool.query(text))[0] as Record<string, unknown>[];
  const close = () => pool.end().catch(() => {});
  try {
    await query('select 1');
  } catch (error) {
    await close();
    if ((error as { errno?: unknown }).errno === UNKNOWN_DATABASE) {
      throw new CliError(
        `MySQL at ${where} has no database ${target.database}: check the URL's database (the application's), or create it (CREATE DATABASE) and run ${MIGRATE}.`,
        EXIT.failure,
      );
    }
    throw unreachable('MySQL', where, error);
  }
  return opened(drizzle(pool), where, query, close, async () => {
    if (!table) return;
    const [row] = await query(
      "select count(*) as found from information_schema.tables where table_schema = database() and table_name = 'idempotency_keys'",
    );
    if (Number(row?.found) === 0) {
      throw new CliError(
        `MySQL at ${where} has no idempotency_keys table in database ${target.database}: pass the application's database in the URL, or create it with ${MIGRATE}.`,
        EXIT.failure,
      );
    }
  });
}

/**
 * Opens a SQLite file with better-sqlite3 (if installed, or asked for) or
 * @libsql/client, and drizzle-orm. Every command but migrate needs the file
 * and its idempotency_keys table: a mistyped path must not leave a new empty
 * file behind. The file's settings (journal_mode) stay the application's.
 */
async function connectSqlite(target: SqliteTarget, table: boolean): Promise<SqlConnection> {
  const file = resolve(target.path);
  if (table && !existsSync(file)) {
    throw new CliError(
      `no SQLite file at ${file}: check the path (relative to the current directory: ${process.cwd()}), or create the database with ${MIGRATE}.`,
      EXIT.failure,
    );
  }
  // better-sqlite3 if the project has it, libSQL otherwise
  const client =
    target.client ??
    ((await installed('better-sqlite3', () => import('better-sqlite3'))) ? 'better-sqlite3' : 'libsql');
  const where = `${file} (${client})`;
  let db: unknown;
  let query: SqlConnection['query'];
  let close: () => Promise<void>;
  if (client === 'better-sqlite3') {
    const mod = await peer('better-sqlite3', () => import('better-sqlite3'), '--sqlite-client better-sqlite3');
    const Database = mod.default;
    const { drizzle } = await peer('drizzle-orm', () => import('drizzle-orm/better-sqlite3'), '--database-url');
    let sqlite: InstanceType<typeof mod.default>;
    try {
      sqlite = new Database(file, { timeout: SQLITE_BUSY_TIMEOUT });
    } catch (error) {
      throw unreachable('the SQLite file', file, error);
    }
    db = drizzle(sqlite);
    query = async (text) => sqlite.prepare(text).all() as Record<string, unknown>[];
    close = async () => void sqlite.close();
  } else {
    const { createClient } = await peer(
      '@libsql/client',
      () => import('@libsql/client'),
      '--sqlite-client libsql',
      target.client === undefined
        ? '--database-url sqlite: needs a SQLite driver, and neither better-sqlite3 nor @libsql/client is installed here: npm install better-sqlite3 (or @libsql/client), next to trpc-idempotency.'
        : undefined,
    );
    const { drizzle } = await peer('drizzle-orm', () => import('drizzle-orm/libsql'), '--database-url');
    const libsql = createClient({ url: pathToFileURL(file).href, timeout: SQLITE_BUSY_TIMEOUT });
    db = drizzle(libsql);
    query = async (text) => (await libsql.execute(text)).rows as unknown as Record<string, unknown>[];
    close = async () => libsql.close();
  }
  try {
    await query('select 1');
  } catch (error) {
    await close();
    throw unreachable('the SQLite file', file, error);
  }
  return opened(db, where, query, close, async () => {
    if (!table) return;
    const [row] = await query(
      "select count(*) as found from sqlite_master where type = 'table' and name = 'idempotency_keys'",
    );
    if (Number(row?.found) === 0) {
      throw new CliError(
        `the SQLite file ${file} has no idempotency_keys table: pass the application's file, or create it with ${MIGRATE}.`,
        EXIT.failure,
      );
    }
  });
}

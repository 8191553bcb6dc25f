import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { drizzle as drizzleSqlite } from 'drizzle-orm/better-sqlite3';
import { drizzle as drizzleMysql } from 'drizzle-orm/mysql2';
import mysql from 'mysql2/promise';
import { drizzleStore, migrateIdempotencyKeys } from 'trpc-idempotency/drizzle';

/** Where the SQLite store is when IDEMPOTENCY_DATABASE_URL is unset: a file every local instance shares. */
export const DEFAULT_SQLITE_FILE = join(tmpdir(), 'payments-idempotency.db');

/**
 * The idempotency store in a database of its own, apart from the ledger:
 * MySQL/MariaDB (`mysql://user:password@host:port/db`) or a SQLite file
 * (`sqlite:path`, `file:path` or a path), with the library's tables created
 * by migrateIdempotencyKeys (instances that start together apply them once).
 * The ledger stays on PostgreSQL: the store does not share its transactions.
 */
export async function openIdempotencyDatabase(kind: 'mysql' | 'sqlite', url: string | undefined) {
  if (kind === 'mysql') {
    if (!url?.startsWith('mysql://')) {
      throw new Error(
        `IDEMPOTENCY_STORE=mysql needs IDEMPOTENCY_DATABASE_URL=mysql://user:password@host:port/db, not ${JSON.stringify(url ?? '')}.`,
      );
    }
    const pool = mysql.createPool({ uri: url, connectionLimit: 10 });
    const db = drizzleMysql(pool);
    await migrateIdempotencyKeys(db);
    return { store: drizzleStore({ db }), where: `MySQL (${new URL(url).host})`, close: () => pool.end() };
  }
  const file = url === undefined || url === '' ? DEFAULT_SQLITE_FILE : url.replace(/^(sqlite|file):/, '');
  // WAL: a replay reads while another instance writes; a write waits up to 5 s for another's lock.
  const sqlite = new Database(file, { timeout: 5_000 });
  sqlite.pragma('journal_mode = WAL');
  const db = drizzleSqlite(sqlite);
  await migrateIdempotencyKeys(db);
  return { store: drizzleStore({ db }), where: `SQLite (${file})`, close: async () => void sqlite.close() };
}

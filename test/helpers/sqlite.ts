import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from '@libsql/client';
import Database from 'better-sqlite3';
import { type BetterSQLite3Database, drizzle } from 'drizzle-orm/better-sqlite3';
import { drizzle as drizzleLibsql, type LibSQLDatabase } from 'drizzle-orm/libsql';
import { migrateIdempotencyKeys } from '../../src/drizzle.js';

/** How long a connection waits for SQLite's write lock (busy_timeout), as docs/sqlite.md recommends. */
export const BUSY_TIMEOUT = 5_000;

export interface SqliteFile {
  /** The database file, in a temporary directory of its own. */
  path: string;
  /** A better-sqlite3 connection to it (WAL, busy_timeout), and a Drizzle database on it. */
  better(): BetterSQLite3Database;
  /** A libSQL client of it (file: URL, `timeout`), and a Drizzle database on it. */
  libsql(): LibSQLDatabase;
  /** Closes every connection and deletes the directory. */
  drop(): void;
}

/**
 * A SQLite file of its own in a temporary directory, in WAL mode, migrated
 * with the package's migrations (migrateIdempotencyKeys) unless `migrate` is false.
 */
export async function sqliteFile(label: string, migrate = true): Promise<SqliteFile> {
  const dir = mkdtempSync(join(tmpdir(), `idem-sqlite-${label}-`));
  const path = join(dir, 'idempotency.db');
  const closers: (() => void)[] = [];
  const better = () => {
    const connection = new Database(path, { timeout: BUSY_TIMEOUT });
    connection.pragma('journal_mode = WAL');
    closers.push(() => connection.close());
    return drizzle(connection);
  };
  const libsql = () => {
    const client = createClient({ url: `file:${path}`, timeout: BUSY_TIMEOUT });
    closers.push(() => client.close());
    return drizzleLibsql(client);
  };
  const first = better();
  if (migrate) await migrateIdempotencyKeys(first);
  return {
    path,
    better,
    libsql,
    drop() {
      for (const close of closers) close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

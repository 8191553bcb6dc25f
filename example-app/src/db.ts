import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { migrate as migratePg } from 'drizzle-orm/node-postgres/migrator';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import pg from 'pg';

export type Db = PgDatabase<PgQueryResultHKT>;

const migrationsFolder = fileURLToPath(new URL('../drizzle', import.meta.url));

/**
 * The business database: PostgreSQL at `databaseUrl`, or PGlite (PostgreSQL
 * in this process, in memory) when there is none, so the demo needs nothing.
 */
export async function openDatabase(
  databaseUrl: string | undefined,
): Promise<{ db: Db; kind: string; close(): Promise<void> }> {
  if (databaseUrl === undefined || databaseUrl === '') {
    const client = new PGlite();
    const db = drizzlePglite(client);
    await migratePglite(db, { migrationsFolder });
    return { db: db as unknown as Db, kind: 'PGlite (in memory)', close: () => client.close() };
  }
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 20 });
  pool.on('error', (error) => console.error(JSON.stringify({ event: 'pg_pool_error', message: error.message })));
  // Several instances may start at once: one migrates, the others wait for it.
  const session = await pool.connect();
  try {
    await session.query('select pg_advisory_lock(727274)');
    // The journal lives in the schema of the tables (the first of the search_path).
    const { rows } = await session.query<{ schema: string }>('select current_schema() as schema');
    await migratePg(drizzlePg(session), { migrationsFolder, migrationsSchema: rows[0]?.schema ?? 'public' });
  } finally {
    await session.query('select pg_advisory_unlock(727274)').catch(() => {});
    session.release();
  }
  return {
    db: drizzlePg(pool) as unknown as Db,
    kind: `PostgreSQL (${new URL(databaseUrl).host})`,
    close: () => pool.end(),
  };
}

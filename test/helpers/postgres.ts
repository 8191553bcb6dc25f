import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { drizzle as drizzlePg, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePglite, type PgliteDatabase } from 'drizzle-orm/pglite';
import pg from 'pg';
import { migrateIdempotencyKeys } from '../../src/drizzle.js';

export const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const MIGRATIONS = fileURLToPath(new URL('../../drizzle', import.meta.url));
/** The migrations journal of this package, apart from the application's own. */
export const MIGRATIONS_TABLE = '__trpc_idempotency_migrations';

export interface PgSchema {
  db: NodePgDatabase;
  pool: pg.Pool;
  schema: string;
  /** A connection string whose sessions use this schema. */
  url: string;
  drop(): Promise<void>;
}

/**
 * A schema of its own on the real server, migrated with the package's
 * migrations (migrateIdempotencyKeys) unless `migrate` is false, so test
 * files never see each other's rows.
 */
export async function isolatedSchema(label: string, poolSize = 10, migrate = true): Promise<PgSchema> {
  const schema = `idem_${label}_${randomUUID().slice(0, 8)}`;
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  await admin.query(`create schema "${schema}"`);
  await admin.end();
  const url = withSearchPath(DATABASE_URL, schema);
  const pool = new pg.Pool({ connectionString: url, max: poolSize });
  pool.on('error', () => {});
  const db = drizzlePg(pool);
  if (migrate)
    await migrateIdempotencyKeys(db, {
      migrationsFolder: MIGRATIONS,
      migrationsSchema: schema,
      migrationsTable: MIGRATIONS_TABLE,
    });
  return {
    db,
    pool,
    schema,
    url,
    async drop() {
      await pool.end();
      const cleanup = new pg.Client({ connectionString: DATABASE_URL });
      await cleanup.connect();
      await cleanup.query(`drop schema "${schema}" cascade`);
      await cleanup.end();
    },
  };
}

/**
 * A pool on `schema` whose sessions default to the isolation `level`, as some
 * teams configure their database (`default_transaction_isolation`). The caller ends it.
 */
export function poolAtIsolation(
  schema: PgSchema,
  level: 'read committed' | 'repeatable read' | 'serializable',
): pg.Pool {
  const url = new URL(schema.url);
  url.searchParams.set(
    'options',
    `-c search_path=${schema.schema} -c default_transaction_isolation=${level.replace(' ', '\\ ')}`,
  );
  const pool = new pg.Pool({ connectionString: url.toString(), max: 10 });
  pool.on('error', () => {});
  return pool;
}

export function withSearchPath(url: string, schema: string): string {
  const u = new URL(url);
  u.searchParams.set('options', `-c search_path=${schema}`);
  return u.toString();
}

/** PostgreSQL embedded in this process (PGlite, WebAssembly), migrated the same way. */
export async function pgliteDb(): Promise<{ db: PgliteDatabase; client: PGlite; close(): Promise<void> }> {
  const client = new PGlite();
  const db = drizzlePglite(client);
  await migrateIdempotencyKeys(db, { migrationsFolder: MIGRATIONS, migrationsTable: MIGRATIONS_TABLE });
  return { db, client, close: () => client.close() };
}

/**
 * The PostgreSQL store on postgres.js (the `postgres` package), the driver
 * create-t3-app generates (`drizzle(postgres(url))`): the store contract, as
 * drizzle-store.test.ts runs it on node-postgres and PGlite, once with
 * postgres.js's defaults (named prepared statements) and once with
 * `prepare: false` (what a transaction-mode pooler such as PgBouncer or
 * Supabase's needs), each on a schema of its own migrated by
 * migrateIdempotencyKeys through the same postgres.js database; and
 * transactional mode, whose transactions postgres.js runs (`sql.begin`).
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { count, eq } from 'drizzle-orm';
import { integer, pgTable, serial, text } from 'drizzle-orm/pg-core';
import { drizzle, type PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { drizzleStore, migrateIdempotencyKeys } from '../../src/drizzle.js';
import { createIdempotencyEngine, type IdempotencyStore } from '../../src/index.js';
import { describeStoreContract } from '../contract/store-contract.js';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const MIGRATIONS = fileURLToPath(new URL('../../drizzle', import.meta.url));
const MIGRATIONS_TABLE = '__trpc_idempotency_migrations';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A business table of the application's, written in the operation's transaction. */
const charges = pgTable('charges', {
  id: serial('id').primaryKey(),
  idemKey: text('idem_key').notNull(),
  amount: integer('amount').notNull(),
});

async function admin<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

for (const prepare of [true, false]) {
  const name = prepare ? 'postgres.js' : 'postgres.js, prepare: false';
  const schema = `idem_postgresjs_${prepare ? 'prepared' : 'unprepared'}_${randomUUID().slice(0, 8)}`;
  let sql: postgres.Sql;
  let db: PostgresJsDatabase;
  const made: IdempotencyStore[] = [];

  beforeAll(async () => {
    await admin((client) => client.query(`create schema "${schema}"`));
    // As create-t3-app's src/server/db/index.ts makes it, on a schema of this file's own.
    sql = postgres(DATABASE_URL, { prepare, max: 10, connection: { search_path: schema }, onnotice: () => {} });
    db = drizzle(sql);
    const { applied } = await migrateIdempotencyKeys(db, {
      migrationsFolder: MIGRATIONS,
      migrationsSchema: schema,
      migrationsTable: MIGRATIONS_TABLE,
    });
    expect(applied).toBeGreaterThan(0);
    await sql`create table charges (id serial primary key, idem_key text not null, amount int not null)`;
  }, 60_000);

  afterAll(async () => {
    await Promise.all(made.map(async (s) => (s as { close?: () => unknown }).close?.()));
    await sql?.end({ timeout: 5 });
    await admin((client) => client.query(`drop schema if exists "${schema}" cascade`));
  });

  describe(`drizzle(postgres(url))${prepare ? '' : ', prepare: false'}`, () => {
    it('the migrations made the table in this schema, through postgres.js', async () => {
      const rows = await sql<{ n: number }[]>`
        select count(*)::int as n from information_schema.tables
        where table_schema = ${schema} and table_name in ('idempotency_keys', 'idempotency_steps')`;
      expect(rows[0]!.n).toBe(2);
    });

    it(`the store's statements ${prepare ? 'are' : 'are not'} named prepared statements on the server`, async () => {
      const store = drizzleStore({ db });
      made.push(store);
      const id = `probe:${randomUUID()}`;
      expect((await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 60_000 })).state).toBe('acquired');
      // pg_prepared_statements shows this session's statements: ask on each of the pool's connections
      // by reserving them all, and count the store's (they name idempotency_keys).
      const reserved = await Promise.all(Array.from({ length: 10 }, () => sql.reserve()));
      try {
        let named = 0;
        for (const connection of reserved) {
          const [row] = await connection<{ n: number }[]>`
            select count(*)::int as n from pg_prepared_statements where statement like '%idempotency_keys%'`;
          named += row!.n;
        }
        if (prepare) expect(named).toBeGreaterThan(0);
        else expect(named).toBe(0);
      } finally {
        for (const connection of reserved) connection.release();
      }
    });
  });

  describe(`transactional mode on drizzle(postgres(url))${prepare ? '' : ', prepare: false'}`, () => {
    const chargesFor = async (key: string) =>
      (await db.select({ n: count() }).from(charges).where(eq(charges.idemKey, key)))[0]!.n;

    it('commits the business write with the stored outcome; a retry replays without writing again', async () => {
      const store = drizzleStore({ db });
      made.push(store);
      const engine = createIdempotencyEngine({ store, transaction: true });
      const key = randomUUID();
      const handle = () =>
        engine.run({ key, name: 'charges.create', payload: { amount: 42 } }, async ({ transaction }) => {
          const tx = transaction as PostgresJsDatabase;
          const [row] = await tx.insert(charges).values({ idemKey: key, amount: 42 }).returning();
          return row!.id;
        });
      const first = await handle();
      expect(first.replayed).toBe(false);
      expect(await handle()).toEqual({ value: first.value, replayed: true });
      expect(await chargesFor(key)).toBe(1);
    });

    it('rolls the business write back when the operation throws, and releases the key: the retry writes once', async () => {
      const store = drizzleStore({ db });
      made.push(store);
      const engine = createIdempotencyEngine({ store, transaction: true });
      const key = randomUUID();
      let attempt = 0;
      const handle = () =>
        engine.run({ key, name: 'charges.create', payload: { amount: 7 } }, async ({ transaction }) => {
          const tx = transaction as PostgresJsDatabase;
          const [row] = await tx.insert(charges).values({ idemKey: key, amount: 7 }).returning();
          if (++attempt === 1) throw new Error('card network reset the connection');
          return row!.id;
        });
      await expect(handle()).rejects.toThrow(/card network reset the connection/);
      expect(await chargesFor(key)).toBe(0);
      const retried = await handle();
      expect(retried.replayed).toBe(false);
      expect(await chargesFor(key)).toBe(1);
    });
  });

  describeStoreContract(
    name,
    () => {
      const store = drizzleStore({ db });
      made.push(store);
      return { store, advance: sleep };
    },
    { notifies: false },
  );
}

/**
 * migrateIdempotencyKeys: replicas that migrate one fresh database at the same
 * moment (each with its own pool, at every default isolation level), a
 * database migrated earlier by drizzle-orm's migrator, a journal holding
 * other migrations, a migrationsFolder that is not this package's, PGlite,
 * bad options. Bundled applications: drizzle-migrate-bundled.test.ts.
 */
import { randomUUID } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { sql } from 'drizzle-orm';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { migrate as drizzleMigratePg } from 'drizzle-orm/node-postgres/migrator';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { migrate as drizzleMigratePglite } from 'drizzle-orm/pglite/migrator';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdempotencyConfigError } from '../../src/core/idempotency-error.js';
import { drizzleStore, migrateIdempotencyKeys } from '../../src/drizzle.js';
import { DATABASE_URL, MIGRATIONS, MIGRATIONS_TABLE } from '../helpers/postgres.js';

const REPLICAS = 6;
const ROUNDS = 5;
const MIGRATIONS_COUNT = readMigrationFiles({ migrationsFolder: MIGRATIONS }).length;

async function admin<T extends pg.QueryResultRow = Record<string, unknown>>(
  text: string,
  values?: unknown[],
): Promise<T[]> {
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  try {
    return (await client.query<T>(text, values)).rows;
  } finally {
    await client.end();
  }
}

/**
 * A fresh database as replicas see it: a schema of the test's own for the
 * table (first in `search_path`), and a journal schema that does not exist
 * yet, as `drizzle` does not on a new database.
 */
class Fresh {
  readonly schema = `idem_mig_${randomUUID().slice(0, 8)}`;
  readonly journal = `${this.schema}_journal`;
  private readonly pools: pg.Pool[] = [];

  async create(): Promise<this> {
    await admin(`create schema "${this.schema}"`);
    return this;
  }

  /** A pool of its own, as a replica has: one connection, `-c` settings added to the search_path. */
  pool(settings: Record<string, string> = {}): pg.Pool {
    const u = new URL(DATABASE_URL);
    const options = Object.entries({ search_path: this.schema, ...settings }).map(
      ([k, v]) => `-c ${k}=${v.replaceAll(' ', '\\ ')}`,
    );
    u.searchParams.set('options', options.join(' '));
    const pool = new pg.Pool({ connectionString: u.toString(), max: 1 });
    pool.on('error', () => {});
    this.pools.push(pool);
    return pool;
  }

  options(extra: { migrationsFolder?: string } = {}) {
    return { migrationsSchema: this.journal, migrationsTable: MIGRATIONS_TABLE, ...extra };
  }

  async journalRows(): Promise<{ hash: string; created_at: string }[]> {
    return admin(`select hash, created_at from "${this.journal}"."${MIGRATIONS_TABLE}" order by id`);
  }

  async drop(): Promise<void> {
    await Promise.all(this.pools.map((p) => p.end()));
    await admin(`drop schema if exists "${this.schema}" cascade`);
    await admin(`drop schema if exists "${this.journal}" cascade`);
  }
}

/** Connects every pool first, so that the calls start together rather than one connection setup apart. */
async function together<T>(pools: pg.Pool[], call: (pool: pg.Pool) => Promise<T>): Promise<T[]> {
  await Promise.all(pools.map((p) => p.query('select 1')));
  return Promise.all(pools.map(call));
}

async function expectMigrated(fresh: Fresh, migrationsFolder = MIGRATIONS): Promise<void> {
  const expected = readMigrationFiles({ migrationsFolder });
  const rows = await fresh.journalRows();
  expect(rows.map((r) => [r.hash, Number(r.created_at)])).toEqual(expected.map((m) => [m.hash, m.folderMillis]));
  const indexes = await admin<{ indexname: string }>(
    `select indexname from pg_indexes where schemaname = $1 and tablename = 'idempotency_keys' order by indexname`,
    [fresh.schema],
  );
  expect(indexes.map((r) => r.indexname)).toEqual([
    'idempotency_keys_expires_at_idx',
    'idempotency_keys_in_progress_idx',
    'idempotency_keys_pkey',
  ]);
  const store = drizzleStore({ db: drizzlePg(fresh.pool()) });
  expect(await store.claim({ id: 'after-migration', fingerprint: 'fp', token: 't', lockTtl: 10_000 })).toMatchObject({
    state: 'acquired',
  });
  expect(await store.claim({ id: 'after-migration', fingerprint: 'fp', token: 'u', lockTtl: 10_000 })).toMatchObject({
    state: 'in_progress',
  });
}

describe(`${REPLICAS} replicas migrating one fresh database at the same moment`, () => {
  it.each([
    ['the server default (read committed)', {}],
    ['repeatable read', { default_transaction_isolation: 'repeatable read' }],
    ['serializable', { default_transaction_isolation: 'serializable' }],
  ])(
    `all succeed, and the migrations are applied once, over ${ROUNDS} rounds: %s`,
    async (_name, settings: Record<string, string>) => {
      for (let round = 0; round < ROUNDS; round++) {
        const fresh = await new Fresh().create();
        try {
          const pools = Array.from({ length: REPLICAS }, () => fresh.pool(settings));
          if (settings.default_transaction_isolation !== undefined) {
            const [row] = (await pools[0]!.query<{ level: string }>('show default_transaction_isolation')).rows;
            expect(row?.level ?? (row as Record<string, string> | undefined)?.default_transaction_isolation).toBe(
              settings.default_transaction_isolation,
            );
          }
          const results = await together(pools, (pool) => migrateIdempotencyKeys(drizzlePg(pool), fresh.options()));
          // One replica applied everything; the others waited for its commit and found it done.
          expect(results.map((r) => r.applied).sort((a, b) => a - b)).toEqual([
            ...Array(REPLICAS - 1).fill(0),
            MIGRATIONS_COUNT,
          ]);
          await expectMigrated(fresh);
        } finally {
          await fresh.drop();
        }
      }
    },
    120_000,
  );

  it('a newer migration is applied once, after the ones already there', async () => {
    const folder = mkdtempSync(join(tmpdir(), 'idem-migrations-'));
    const fresh = await new Fresh().create();
    try {
      cpSync(MIGRATIONS, folder, { recursive: true });
      const journalPath = join(folder, 'meta', '_journal.json');
      const journal = JSON.parse(readFileSync(journalPath, 'utf8')) as {
        entries: { idx: number; when: number; tag: string }[];
      };
      const lastEntry = journal.entries.at(-1)!;
      journal.entries.push({
        ...lastEntry,
        idx: lastEntry.idx + 1,
        when: lastEntry.when + 1_000,
        tag: '9999_test_note',
      });
      writeFileSync(journalPath, JSON.stringify(journal));
      writeFileSync(join(folder, '9999_test_note.sql'), 'ALTER TABLE "idempotency_keys" ADD COLUMN "note" text;');

      expect(await migrateIdempotencyKeys(drizzlePg(fresh.pool()), fresh.options())).toEqual({
        applied: MIGRATIONS_COUNT,
      });
      const pools = Array.from({ length: REPLICAS }, () =>
        fresh.pool({ default_transaction_isolation: 'serializable' }),
      );
      const results = await together(pools, (pool) =>
        migrateIdempotencyKeys(drizzlePg(pool), fresh.options({ migrationsFolder: folder })),
      );
      expect(results.map((r) => r.applied).sort((a, b) => a - b)).toEqual([...Array(REPLICAS - 1).fill(0), 1]);
      await expectMigrated(fresh, folder);
      const columns = await admin(
        `select 1 from information_schema.columns where table_schema = $1 and table_name = 'idempotency_keys' and column_name = 'note'`,
        [fresh.schema],
      );
      expect(columns).toHaveLength(1);
    } finally {
      await fresh.drop();
      rmSync(folder, { recursive: true, force: true });
    }
  }, 60_000);

  it('takes the documented advisory lock, and waits while someone else holds it', async () => {
    const fresh = await new Fresh().create();
    const holder = new pg.Client({ connectionString: DATABASE_URL });
    await holder.connect();
    try {
      await holder.query('select pg_advisory_lock(8390892628016915821)');
      // One connection: the helper's transaction runs on this backend.
      const pool = fresh.pool();
      const [{ pid }] = (await pool.query<{ pid: number }>('select pg_backend_pid() as pid')).rows as [{ pid: number }];
      let settled = false;
      const migrating = migrateIdempotencyKeys(drizzlePg(pool), fresh.options()).finally(() => {
        settled = true;
      });
      const deadline = Date.now() + 10_000;
      let waiting: unknown[] = [];
      while (waiting.length === 0 && Date.now() < deadline) {
        waiting = await admin(
          `select 1 from pg_locks where locktype = 'advisory' and classid = 1953656931 and objid = 1768187245 and objsubid = 1 and not granted and pid = $1`,
          [pid],
        );
      }
      expect(waiting).toHaveLength(1);
      expect(settled).toBe(false);
      expect(await admin(`select 1 from pg_namespace where nspname = $1`, [fresh.journal])).toHaveLength(0);
      await holder.query('select pg_advisory_unlock(8390892628016915821)');
      expect(await migrating).toEqual({ applied: MIGRATIONS_COUNT });
      await expectMigrated(fresh);
    } finally {
      await holder.end();
      await fresh.drop();
    }
  });
});

describe('a database of the previous version (migrated up to 0001_idempotency_steps), upgraded', () => {
  it('gets 0002 (lock_ttl, the index of claims in progress) once, with replicas at the same moment; its rows stay, without a lease', async () => {
    const folder = mkdtempSync(join(tmpdir(), 'idem-migrations-0001-'));
    const fresh = await new Fresh().create();
    try {
      // The previous version's drizzle/: the same files, its journal ending at 0001.
      cpSync(MIGRATIONS, folder, { recursive: true });
      const journalPath = join(folder, 'meta', '_journal.json');
      const journal = JSON.parse(readFileSync(journalPath, 'utf8')) as { entries: { tag: string }[] };
      journal.entries.splice(2);
      expect(journal.entries.map((e) => e.tag)).toEqual(['0000_idempotency_keys', '0001_idempotency_steps']);
      writeFileSync(journalPath, JSON.stringify(journal));
      await drizzleMigratePg(drizzlePg(fresh.pool()), { migrationsFolder: folder, ...fresh.options() });
      expect(await fresh.journalRows()).toHaveLength(2);
      // Rows the previous version wrote: a claim in progress and an outcome.
      await admin(
        `insert into "${fresh.schema}".idempotency_keys (id, state, fingerprint, token, body, expires_at, created_at) values
           (':op:held', 'in_progress', 'fp', 'old', null, now() + interval '1 minute', now() - interval '1 second'),
           (':op:done', 'completed', 'fp', 'old', '"r"', now() + interval '1 minute', now() - interval '2 seconds')`,
      );

      const pools = Array.from({ length: REPLICAS }, () => fresh.pool());
      const results = await together(pools, (pool) => migrateIdempotencyKeys(drizzlePg(pool), fresh.options()));
      expect(results.map((r) => r.applied).sort((a, b) => a - b)).toEqual([...Array(REPLICAS - 1).fill(0), 1]);
      await expectMigrated(fresh);

      const rows = await admin(
        `select id, lock_ttl from "${fresh.schema}".idempotency_keys where id like ':op:%' order by id`,
      );
      expect(rows).toEqual([
        { id: ':op:done', lock_ttl: null },
        { id: ':op:held', lock_ttl: null },
      ]);
      const store = drizzleStore({ db: drizzlePg(fresh.pool()) });
      const held = await store.admin.inspect({ id: ':op:held' });
      expect(held).toMatchObject({ state: 'in_progress', token: 'old', fingerprint: 'fp' });
      expect(held.lockTtl).toBeUndefined();
      expect(held.claimedAt).toBeLessThan(held.time);
      expect(await store.admin.inspect({ id: ':op:done', body: true })).toMatchObject({
        state: 'completed',
        bytes: 3,
        body: '"r"',
      });
      expect(await store.claim({ id: ':op:done', fingerprint: 'fp', token: 'new', lockTtl: 1_000 })).toMatchObject({
        state: 'completed',
        body: '"r"',
      });
    } finally {
      await fresh.drop();
      rmSync(folder, { recursive: true, force: true });
    }
  }, 60_000);
});

describe('a database migrated earlier by drizzle-orm’s migrator', () => {
  it('is recognised: nothing is applied, nothing fails, also with replicas at the same moment', async () => {
    const fresh = await new Fresh().create();
    try {
      await drizzleMigratePg(drizzlePg(fresh.pool()), { migrationsFolder: MIGRATIONS, ...fresh.options() });
      const before = await fresh.journalRows();
      expect(before).toHaveLength(MIGRATIONS_COUNT);
      const pools = Array.from({ length: REPLICAS }, () => fresh.pool());
      const results = await together(pools, (pool) => migrateIdempotencyKeys(drizzlePg(pool), fresh.options()));
      expect(results).toEqual(Array(REPLICAS).fill({ applied: 0 }));
      expect(await fresh.journalRows()).toEqual(before);
      await expectMigrated(fresh);
    } finally {
      await fresh.drop();
    }
  });

  it('needs no CREATE privilege when everything is there: an application role may call it at every start', async () => {
    const fresh = await new Fresh().create();
    const role = `idem_mig_role_${randomUUID().slice(0, 8)}`;
    await admin(`create role "${role}" login`);
    try {
      await drizzleMigratePg(drizzlePg(fresh.pool()), { migrationsFolder: MIGRATIONS, ...fresh.options() });
      await admin(`grant usage on schema "${fresh.schema}", "${fresh.journal}" to "${role}"`);
      await admin(`grant select on "${fresh.journal}"."${MIGRATIONS_TABLE}" to "${role}"`);
      const u = new URL(DATABASE_URL);
      u.username = role;
      u.searchParams.set('options', `-c search_path=${fresh.schema}`);
      const pool = new pg.Pool({ connectionString: u.toString(), max: 1 });
      try {
        // CREATE SCHEMA/TABLE IF NOT EXISTS would be refused here even though both exist.
        await expect(pool.query(`create schema if not exists "${fresh.journal}"`)).rejects.toThrow(/permission denied/);
        expect(await migrateIdempotencyKeys(drizzlePg(pool), fresh.options())).toEqual({ applied: 0 });
      } finally {
        await pool.end();
      }
    } finally {
      await fresh.drop();
      await admin(`drop owned by "${role}"`);
      await admin(`drop role "${role}"`);
    }
  });

  it('and the other way round: drizzle-orm’s migrator finds nothing to do after the helper', async () => {
    const fresh = await new Fresh().create();
    try {
      await migrateIdempotencyKeys(drizzlePg(fresh.pool()), fresh.options());
      const before = await fresh.journalRows();
      await drizzleMigratePg(drizzlePg(fresh.pool()), { migrationsFolder: MIGRATIONS, ...fresh.options() });
      expect(await fresh.journalRows()).toEqual(before);
    } finally {
      await fresh.drop();
    }
  });
});

describe('a journal that holds what is not this package’s migrations', () => {
  const PACKAGE = readMigrationFiles({ migrationsFolder: MIGRATIONS });

  /** A fresh database whose journal holds `rows`, as another tool or an earlier version left it. */
  async function withJournal(rows: [hash: string, createdAt: number][]): Promise<Fresh> {
    const fresh = await new Fresh().create();
    await admin(`create schema "${fresh.journal}"`);
    await admin(
      `create table "${fresh.journal}"."${MIGRATIONS_TABLE}" (id serial primary key, hash text not null, created_at bigint)`,
    );
    for (const [hash, createdAt] of rows) {
      await admin(`insert into "${fresh.journal}"."${MIGRATIONS_TABLE}" (hash, created_at) values ($1, $2)`, [
        hash,
        createdAt,
      ]);
    }
    return fresh;
  }

  async function refused(fresh: Fresh, options: { migrationsFolder?: string } = {}): Promise<string> {
    const before = await fresh.journalRows();
    const error = await migrateIdempotencyKeys(drizzlePg(fresh.pool()), fresh.options(options)).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect(await fresh.journalRows()).toEqual(before);
    expect(
      await admin(`select 1 from pg_tables where schemaname = $1 and tablename = 'idempotency_keys'`, [fresh.schema]),
    ).toHaveLength(0);
    return (error as Error).message;
  }

  it('an application’s entry newer than the package’s, as versions up to 0.2.0 recorded it when bundled: refused, with what to delete, also with migrationsFolder', async () => {
    const fresh = await withJournal([['app-hash', 1_900_000_000_000]]);
    try {
      for (const options of [{}, { migrationsFolder: MIGRATIONS }]) {
        const message = await refused(fresh, options);
        expect(message).toMatch(
          /holds 1 entry that is not one of trpc-idempotency's migrations: id 1 \(created_at 1900000000000, hash app-hash\.\.\.\); this package's 0000_idempotency_keys, 0001_idempotency_steps, 0002_lock_ttl_in_progress_idx are not recorded\. Nothing was applied\./,
        );
        expect(message).toContain(`delete from "${fresh.journal}"."${MIGRATIONS_TABLE}" where id in (1)`);
      }
      await admin(`delete from "${fresh.journal}"."${MIGRATIONS_TABLE}" where id in (1)`);
      expect(await migrateIdempotencyKeys(drizzlePg(fresh.pool()), fresh.options())).toEqual({
        applied: MIGRATIONS_COUNT,
      });
      await expectMigrated(fresh);
    } finally {
      await fresh.drop();
    }
  });

  it('an application’s entry before the package’s (the package’s applied after it through migrationsFolder): refused too', async () => {
    const fresh = await withJournal([
      ['app-hash', 1_700_000_000_000],
      ...PACKAGE.map((m): [string, number] => [m.hash, m.folderMillis]),
    ]);
    try {
      expect(await refused(fresh)).toMatch(
        /holds 1 entry that is not one of trpc-idempotency's migrations: id 1 .*, before or among this package's own\. Nothing was applied\./,
      );
    } finally {
      await fresh.drop();
    }
  });

  it('a later version’s migration after all of this version’s (a rollback): accepted, nothing applied', async () => {
    const fresh = await new Fresh().create();
    try {
      await migrateIdempotencyKeys(drizzlePg(fresh.pool()), fresh.options());
      await admin(`insert into "${fresh.journal}"."${MIGRATIONS_TABLE}" (hash, created_at) values ($1, $2)`, [
        'later-version-hash',
        PACKAGE.at(-1)!.folderMillis + 1_000,
      ]);
      const before = await fresh.journalRows();
      expect(await migrateIdempotencyKeys(drizzlePg(fresh.pool()), fresh.options())).toEqual({ applied: 0 });
      expect(await fresh.journalRows()).toEqual(before);
    } finally {
      await fresh.drop();
    }
  });

  it('a later migration recorded without an earlier one: refused, naming both', async () => {
    const fresh = await withJournal([[PACKAGE[1]!.hash, PACKAGE[1]!.folderMillis]]);
    try {
      expect(await refused(fresh)).toMatch(
        /records 0001_idempotency_steps but not the earlier 0000_idempotency_keys: it was edited by hand or by another tool\. Nothing was applied\./,
      );
    } finally {
      await fresh.drop();
    }
  });

  it('a migration recorded by its `when` under another hash (Drizzle’s migrator identifies it so) is this package’s', async () => {
    const fresh = await withJournal([[`crlf-${PACKAGE[0]!.hash}`, PACKAGE[0]!.folderMillis]]);
    try {
      // What 0000 created, as that migrator applied it (later migrations alter its table).
      for (const statement of readFileSync(join(MIGRATIONS, '0000_idempotency_keys.sql'), 'utf8').split(
        '--> statement-breakpoint',
      )) {
        await admin(`set search_path to "${fresh.schema}"; ${statement}`);
      }
      expect(await migrateIdempotencyKeys(drizzlePg(fresh.pool()), fresh.options())).toEqual({
        applied: MIGRATIONS_COUNT - 1,
      });
      // 0000 is taken as applied (its table is not created again: that would fail); the later ones are applied.
      expect(
        await admin(`select tablename from pg_tables where schemaname = $1 order by tablename`, [fresh.schema]),
      ).toEqual([{ tablename: 'idempotency_keys' }, { tablename: 'idempotency_steps' }]);
      expect(
        await admin(
          `select 1 from information_schema.columns where table_schema = $1 and table_name = 'idempotency_keys' and column_name = 'lock_ttl'`,
          [fresh.schema],
        ),
      ).toHaveLength(1);
    } finally {
      await fresh.drop();
    }
  });
});

describe('migrationsFolder', () => {
  let client: PGlite;
  const folders: string[] = [];
  beforeAll(() => {
    client = new PGlite();
  });
  afterAll(async () => {
    await client?.close();
    for (const folder of folders) rmSync(folder, { recursive: true, force: true });
  });

  /** A copy of drizzle/, changed by `edit`. */
  function copy(edit: (folder: string, journal: { entries: { tag: string; when: number }[] }) => void): string {
    const folder = mkdtempSync(join(tmpdir(), 'idem-migrations-'));
    folders.push(folder);
    cpSync(MIGRATIONS, folder, { recursive: true });
    const journalPath = join(folder, 'meta', '_journal.json');
    const journal = JSON.parse(readFileSync(journalPath, 'utf8'));
    edit(folder, journal);
    writeFileSync(journalPath, JSON.stringify(journal));
    return folder;
  }

  it.each([
    [
      'an application’s folder',
      () => fileURLToPath(new URL('../../example-app/drizzle', import.meta.url)),
      /is not trpc-idempotency's migrations folder, or not of this version: its entry 0 is 0000_ledger, where this package has 0000_idempotency_keys\. `migrationsFolder` must begin with this version's migrations \(0000_idempotency_keys, 0001_idempotency_steps, 0002_lock_ttl_in_progress_idx\), unchanged/,
    ],
    [
      'an older version’s folder',
      () => copy((_folder, journal) => journal.entries.splice(1)),
      /or not of this version: it ends before 0001_idempotency_steps\./,
    ],
    [
      'a folder whose migration was edited',
      () =>
        copy((folder) =>
          writeFileSync(
            join(folder, '0001_idempotency_steps.sql'),
            `${readFileSync(join(folder, '0001_idempotency_steps.sql'), 'utf8')}\n-- edited`,
          ),
        ),
      /or not of this version: its 0001_idempotency_steps differs from this version's/,
    ],
    [
      'a folder whose SQL file is missing',
      () => copy((folder) => rmSync(join(folder, '0001_idempotency_steps.sql'))),
      /the migrations in .* cannot be read: No file .*0001_idempotency_steps\.sql found/,
    ],
  ])('refuses %s, before touching the database', async (_name, folder, message) => {
    const error = await migrateIdempotencyKeys(drizzlePglite(client), { migrationsFolder: folder() }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toMatch(message);
    const { rows } = await client.query(`select 1 from pg_namespace where nspname = 'drizzle'`);
    expect(rows).toHaveLength(0);
  });
});

describe('PGlite', () => {
  let client: PGlite;
  beforeAll(() => {
    client = new PGlite();
  });
  afterAll(async () => {
    await client?.close();
  });

  it('migrates with every default (the drizzle schema, the migrations in the code), once, and the store works', async () => {
    const db = drizzlePglite(client);
    const results = await Promise.all([
      migrateIdempotencyKeys(db),
      migrateIdempotencyKeys(db),
      migrateIdempotencyKeys(db),
    ]);
    expect(results.map((r) => r.applied).sort((a, b) => a - b)).toEqual([0, 0, MIGRATIONS_COUNT]);
    expect(await migrateIdempotencyKeys(db)).toEqual({ applied: 0 });
    const { rows } = await client.query<{ hash: string }>(`select hash from drizzle.${MIGRATIONS_TABLE} order by id`);
    expect(rows.map((r) => r.hash)).toEqual(readMigrationFiles({ migrationsFolder: MIGRATIONS }).map((m) => m.hash));
    const store = drizzleStore({ db });
    expect(await store.claim({ id: 'lite', fingerprint: 'fp', token: 't', lockTtl: 10_000 })).toMatchObject({
      state: 'acquired',
    });
  });

  it('recognises a database migrated by drizzle-orm’s PGlite migrator', async () => {
    const other = new PGlite();
    try {
      const db = drizzlePglite(other);
      await drizzleMigratePglite(db, { migrationsFolder: MIGRATIONS, migrationsTable: MIGRATIONS_TABLE });
      expect(await migrateIdempotencyKeys(db, { migrationsFolder: new URL('../../drizzle', import.meta.url) })).toEqual(
        {
          applied: 0,
        },
      );
      const { rows } = await other.query<{ n: number }>(`select count(*)::int as n from drizzle.${MIGRATIONS_TABLE}`);
      expect(rows[0]?.n).toBe(MIGRATIONS_COUNT);
    } finally {
      await other.close();
    }
  });
});

describe('options', () => {
  let client: PGlite;
  beforeAll(() => {
    client = new PGlite();
  });
  afterAll(async () => {
    await client?.close();
  });

  it.each([
    [
      'an empty table name',
      { migrationsTable: '' },
      /`migrationsTable` must be a non-empty name .*got the string ""\. Leave it out to use '__trpc_idempotency_migrations'/,
    ],
    [
      'a table name PostgreSQL would truncate',
      { migrationsTable: 'j'.repeat(64) },
      /`migrationsTable` must be .* at most 63 bytes \(PostgreSQL truncates longer ones\), got a name of 64 bytes/,
    ],
    [
      'a schema that is not a string',
      { migrationsSchema: 42 },
      /`migrationsSchema` must be a non-empty name .*got the number 42\. Leave it out to use 'drizzle'/,
    ],
    [
      'a misspelt option',
      { migrationTable: 'x' },
      /unknown option `migrationTable`; the options are `migrationsFolder`, `migrationsSchema`, `migrationsTable`/,
    ],
    [
      'a folder without migrations',
      { migrationsFolder: tmpdir() },
      /holds no migrations \(meta\/_journal\.json is missing\)\. Point `migrationsFolder` at trpc-idempotency's drizzle\/ folder/,
    ],
    [
      'a URL that is not a file',
      { migrationsFolder: new URL('https://example.com/drizzle') },
      /`migrationsFolder` must be a path or a file: URL, got an object/,
    ],
    ['options that are not an object', 'drizzle', /`options` must be an object, got the string "drizzle"/],
  ])('refuses %s, before touching the database', async (_name, options, message) => {
    const error = await migrateIdempotencyKeys(drizzlePglite(client), options as never).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toMatch(/^migrateIdempotencyKeys: /);
    expect((error as Error).message).toMatch(message);
    const { rows } = await client.query(`select 1 from pg_namespace where nspname = 'drizzle'`);
    expect(rows).toHaveLength(0);
  });

  it('refuses what is not a Drizzle PostgreSQL database, and a transaction', async () => {
    await expect(migrateIdempotencyKeys({} as never)).rejects.toThrow(/`db` must be a Drizzle PostgreSQL database/);
    const db = drizzlePglite(client);
    const error = await db.transaction((tx) => migrateIdempotencyKeys(tx)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    expect((error as Error).message).toMatch(/pass the database .*not a transaction/);
    expect((await db.execute(sql`select 1 from pg_namespace where nspname = 'drizzle'`)).rows).toHaveLength(0);
  });
});

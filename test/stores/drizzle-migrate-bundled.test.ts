/**
 * migrateIdempotencyKeys in an application bundled by esbuild, in ESM and in CommonJS (as AWS CDK's
 * NodejsFunction builds it), whose dist/ sits beside the application's package.json and
 * drizzle-kit's default drizzle/ folder holding the application's own migration. The package's
 * migrations are applied and recorded, never the application's; a journal that already holds the
 * application's entry (as earlier versions wrote it) is refused with IdempotencyConfigError; an
 * explicit `migrationsFolder` must be this package's. Each test runs on a database of its own, with
 * every default (the `drizzle` schema, `public` for the table), as an application does.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { build } from 'esbuild';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DATABASE_URL, MIGRATIONS, MIGRATIONS_TABLE } from '../helpers/postgres.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const PACKAGE_MIGRATIONS = readMigrationFiles({ migrationsFolder: MIGRATIONS });

/** The application's own migration, newer than the package's (drizzle-kit stamps migrations when it generates them). */
const APP_MIGRATION = {
  tag: '0000_app_orders',
  when: 1_900_000_000_000,
  sql: 'CREATE TABLE "app_orders" (\n\t"id" serial PRIMARY KEY NOT NULL,\n\t"total" integer NOT NULL\n);\n',
};

/** The application: migrate at startup, then one claim through the store; prints what happened as JSON. */
const SERVER = `
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { drizzleStore, migrateIdempotencyKeys } from ${JSON.stringify(join(REPO, 'src', 'drizzle.ts'))};

async function main() {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 1 });
  const db = drizzle(pool);
  const out = {};
  try {
    out.result = await migrateIdempotencyKeys(db, JSON.parse(process.env.MIGRATE_OPTIONS ?? '{}'));
  } catch (error) {
    out.error = { name: error.name, message: error.message };
  }
  try {
    const claim = await drizzleStore({ db }).claim({ id: 'bundled', fingerprint: 'fp', token: 'run-' + process.pid, lockTtl: 10000 });
    out.claim = claim.state;
  } catch (error) {
    out.claim = 'failed: ' + (error.cause?.message ?? error.message);
  }
  await pool.end();
  console.log(JSON.stringify(out));
}
main();
`;

type Format = 'esm' | 'cjs';
interface RunOutput {
  result?: { applied: number };
  error?: { name: string; message: string };
  claim: string;
}

let app: string;
const bundles = {} as Record<Format, string>;

beforeAll(async () => {
  app = mkdtempSync(join(tmpdir(), 'idem-bundled-app-'));
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'bundled-app', private: true, type: 'module' }));
  mkdirSync(join(app, 'drizzle', 'meta'), { recursive: true });
  writeFileSync(
    join(app, 'drizzle', 'meta', '_journal.json'),
    JSON.stringify({
      version: '7',
      dialect: 'postgresql',
      entries: [{ idx: 0, version: '7', when: APP_MIGRATION.when, tag: APP_MIGRATION.tag, breakpoints: true }],
    }),
  );
  writeFileSync(join(app, 'drizzle', `${APP_MIGRATION.tag}.sql`), APP_MIGRATION.sql);
  mkdirSync(join(app, 'src'));
  writeFileSync(join(app, 'src', 'server.js'), SERVER);
  for (const format of ['esm', 'cjs'] as const) {
    const outfile = join(app, 'dist', format === 'esm' ? 'server.mjs' : 'server.cjs');
    await build({
      entryPoints: [join(app, 'src', 'server.js')],
      outfile,
      bundle: true,
      platform: 'node',
      target: 'node20',
      format,
      nodePaths: [join(REPO, 'node_modules')],
      external: ['pg-native'],
      // The usual banner of an ESM server bundle: the CommonJS packages in it (pg) require Node's modules.
      banner:
        format === 'esm'
          ? {
              js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);",
            }
          : {},
      logLevel: 'silent',
    });
    bundles[format] = outfile;
  }
}, 60_000);

afterAll(() => {
  if (app) rmSync(app, { recursive: true, force: true });
});

async function admin(url: string, text: string, values?: unknown[]): Promise<Record<string, unknown>[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(text, values)).rows;
  } finally {
    await client.end();
  }
}

/** A database of the test's own, dropped after it. */
const databases: string[] = [];
async function freshDatabase(): Promise<string> {
  const name = `idem_bundled_${randomUUID().slice(0, 8)}`;
  await admin(DATABASE_URL, `create database "${name}"`);
  databases.push(name);
  const u = new URL(DATABASE_URL);
  u.pathname = `/${name}`;
  return u.toString();
}
afterEach(async () => {
  for (const name of databases.splice(0)) await admin(DATABASE_URL, `drop database if exists "${name}" with (force)`);
});

async function run(format: Format, url: string, options: Record<string, unknown> = {}): Promise<RunOutput> {
  const { stdout } = await promisify(execFile)(process.execPath, [bundles[format]], {
    cwd: app,
    env: { ...process.env, DATABASE_URL: url, MIGRATE_OPTIONS: JSON.stringify(options) },
  });
  return JSON.parse(stdout.trim().split('\n').at(-1)!) as RunOutput;
}

async function tables(url: string): Promise<string[]> {
  const rows = await admin(url, `select tablename from pg_tables where schemaname = 'public' order by tablename`);
  return rows.map((r) => String(r.tablename));
}

async function journal(url: string): Promise<[string, number][]> {
  const rows = await admin(url, `select hash, created_at from drizzle."${MIGRATIONS_TABLE}" order by id`);
  return rows.map((r) => [String(r.hash), Number(r.created_at)]);
}

const packageJournal = PACKAGE_MIGRATIONS.map((m) => [m.hash, m.folderMillis]);

describe.each(['esm', 'cjs'] as const)(
  'a server bundled as %s beside the application’s own drizzle/ folder',
  (format) => {
    it('applies and records the package’s migrations, not the application’s, and the store works', async () => {
      const url = await freshDatabase();
      expect(await run(format, url)).toEqual({ result: { applied: PACKAGE_MIGRATIONS.length }, claim: 'acquired' });
      expect(await tables(url)).toEqual(['idempotency_keys', 'idempotency_steps']);
      expect(await journal(url)).toEqual(packageJournal);
      // The next start finds them applied.
      expect(await run(format, url)).toEqual({ result: { applied: 0 }, claim: 'in_progress' });
      expect(await journal(url)).toEqual(packageJournal);
    });

    it('applies the package’s folder when it is passed, and refuses the application’s', async () => {
      const url = await freshDatabase();
      const refused = await run(format, url, { migrationsFolder: join(app, 'drizzle') });
      expect(refused.error?.name).toBe('IdempotencyConfigError');
      expect(refused.error?.message).toMatch(/not trpc-idempotency's migrations/);
      expect(await tables(url)).toEqual([]);
      expect(await run(format, url, { migrationsFolder: MIGRATIONS })).toEqual({
        result: { applied: PACKAGE_MIGRATIONS.length },
        claim: 'acquired',
      });
      expect(await tables(url)).toEqual(['idempotency_keys', 'idempotency_steps']);
      expect(await journal(url)).toEqual(packageJournal);
    });

    it('refuses a journal that holds the application’s migration, as earlier versions wrote it, and applies once it is removed', async () => {
      const url = await freshDatabase();
      // The state earlier versions left: the application's table, its entry in this package's journal, no idempotency_keys.
      await admin(url, APP_MIGRATION.sql);
      await admin(url, 'create schema drizzle');
      await admin(
        url,
        `create table drizzle."${MIGRATIONS_TABLE}" (id serial primary key, hash text not null, created_at bigint)`,
      );
      await admin(url, `insert into drizzle."${MIGRATIONS_TABLE}" (hash, created_at) values ($1, $2)`, [
        'app-migration-hash',
        APP_MIGRATION.when,
      ]);
      for (const options of [{}, { migrationsFolder: MIGRATIONS }]) {
        const out = await run(format, url, options);
        expect(out.error?.name).toBe('IdempotencyConfigError');
        expect(out.error?.message).toMatch(/holds 1 entry that is not one of trpc-idempotency's migrations/);
        expect(out.error?.message).toContain(`delete from "drizzle"."${MIGRATIONS_TABLE}" where id in (1)`);
        expect(out.claim).toMatch(/^failed: relation "idempotency_keys" does not exist/);
        expect(await tables(url)).toEqual(['app_orders']);
        expect(await journal(url)).toEqual([['app-migration-hash', APP_MIGRATION.when]]);
      }
      await admin(url, `delete from drizzle."${MIGRATIONS_TABLE}" where id in (1)`);
      expect(await run(format, url)).toEqual({ result: { applied: PACKAGE_MIGRATIONS.length }, claim: 'acquired' });
      expect(await journal(url)).toEqual(packageJournal);
    });
  },
);

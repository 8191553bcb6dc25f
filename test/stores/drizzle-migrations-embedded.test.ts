/**
 * src/stores/drizzle/embedded-migrations.ts (and mysql/embedded-migrations.ts, for drizzle/mysql/) carries the migrations of drizzle/ in the code, so that
 * migrateIdempotencyKeys needs no folder (a bundle has moved the code away from it): it must be
 * what Drizzle's migrator reads from drizzle/, entry for entry (tag, `when`, hash, SQL text).
 * When drizzle-kit has generated a migration, write the module again with
 * `UPDATE_EMBEDDED_MIGRATIONS=1 npx vitest run test/stores/drizzle-migrations-embedded.test.ts`.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { describe, expect, it } from 'vitest';
import { PACKAGE_MIGRATIONS } from '../../src/stores/drizzle/embedded-migrations.js';
import { MYSQL_MIGRATIONS } from '../../src/stores/drizzle/mysql/embedded-migrations.js';
import { SQLITE_MIGRATIONS } from '../../src/stores/drizzle/sqlite/embedded-migrations.js';
import { MIGRATIONS } from '../helpers/postgres.js';

const MODULE = fileURLToPath(new URL('../../src/stores/drizzle/embedded-migrations.ts', import.meta.url));
const MYSQL_MODULE = fileURLToPath(new URL('../../src/stores/drizzle/mysql/embedded-migrations.ts', import.meta.url));
const MYSQL_FOLDER = join(MIGRATIONS, 'mysql');
const SQLITE_MODULE = fileURLToPath(new URL('../../src/stores/drizzle/sqlite/embedded-migrations.ts', import.meta.url));
const SQLITE_FOLDER = join(MIGRATIONS, 'sqlite');

/** drizzle/ (or drizzle/mysql/) as Drizzle's migrator reads it, with each entry's tag from the journal. */
function folder(MIGRATIONS_FOLDER = MIGRATIONS) {
  const MIGRATIONS = MIGRATIONS_FOLDER;
  const journal = JSON.parse(readFileSync(join(MIGRATIONS, 'meta', '_journal.json'), 'utf8')) as {
    entries: { tag: string; when: number }[];
  };
  const read = readMigrationFiles({ migrationsFolder: MIGRATIONS });
  return journal.entries.map((entry, i) => ({
    tag: entry.tag,
    when: read[i]!.folderMillis,
    hash: read[i]!.hash,
    sql: readFileSync(join(MIGRATIONS, `${entry.tag}.sql`), 'utf8'),
  }));
}

/** A string literal as Biome writes it here: one line, in single quotes unless double ones need fewer escapes. */
function literal(text: string): string {
  const quote = text.split("'").length > text.split('"').length ? '"' : "'";
  const escaped = text
    .replaceAll('\\', '\\\\')
    .replaceAll(quote, `\\${quote}`)
    .replaceAll('\r', '\\r')
    .replaceAll('\n', '\\n')
    .replaceAll('\t', '\\t');
  return `${quote}${escaped}${quote}`;
}

function entriesOf(migrations: ReturnType<typeof folder>): string[] {
  return migrations.map(
    (m) =>
      `  {\n    tag: ${literal(m.tag)},\n    when: ${m.when},\n    hash: ${literal(m.hash)},\n    sql: ${literal(m.sql)},\n  },\n`,
  );
}

/** A dialect's module (mysql/, sqlite/): its migrations as PackageMigration entries. */
function dialectModuleText(dialect: 'mysql' | 'sqlite', name: string, constant: string): string {
  return `// Generated from drizzle/${dialect}/ (meta/_journal.json and each migration's SQL file): do not edit. After
// drizzle-kit generates a migration (npx drizzle-kit generate --config drizzle-${dialect}.config.ts), write it again with
// UPDATE_EMBEDDED_MIGRATIONS=1 npx vitest run test/stores/drizzle-migrations-embedded.test.ts
// (that test fails while this file and drizzle/${dialect}/ differ).
import type { PackageMigration } from '../embedded-migrations.js';

/** This package's ${name} migrations, oldest first: what drizzle/${dialect}/ holds. */
export const ${constant}: readonly PackageMigration[] = [
${entriesOf(folder(join(MIGRATIONS, dialect))).join('')}];
`;
}

const mysqlModuleText = () => dialectModuleText('mysql', 'MySQL/MariaDB', 'MYSQL_MIGRATIONS');

function moduleText(): string {
  const entries = folder().map(
    (m) =>
      `  {\n    tag: ${literal(m.tag)},\n    when: ${m.when},\n    hash: ${literal(m.hash)},\n    sql: ${literal(m.sql)},\n  },\n`,
  );
  return `// Generated from drizzle/ (meta/_journal.json and each migration's SQL file): do not edit. After drizzle-kit
// generates a migration, write it again with
// UPDATE_EMBEDDED_MIGRATIONS=1 npx vitest run test/stores/drizzle-migrations-embedded.test.ts
// (that test fails while this file and drizzle/ differ).

/** One of this package's migrations, as Drizzle's migrator reads it from drizzle/. */
export interface PackageMigration {
  /** Its name in the journal, and its file's name in drizzle/ without \`.sql\`. */
  readonly tag: string;
  /** The journal's \`when\`, recorded as \`created_at\`. */
  readonly when: number;
  /** The SHA-256 of the file, in hex, recorded as \`hash\`. */
  readonly hash: string;
  /** The file's text: statements separated by \`--> statement-breakpoint\`. */
  readonly sql: string;
}

/** This package's migrations, oldest first: what drizzle/ holds. */
export const PACKAGE_MIGRATIONS: readonly PackageMigration[] = [
${entries.join('')}];
`;
}

describe('the migrations carried in the code', () => {
  it('are drizzle/’s, entry for entry', () => {
    if (process.env.UPDATE_EMBEDDED_MIGRATIONS === '1') writeFileSync(MODULE, moduleText());
    expect(PACKAGE_MIGRATIONS.map((m) => ({ ...m }))).toEqual(folder());
    expect(readFileSync(MODULE, 'utf8')).toBe(moduleText());
  });

  it('has at least the two tables’ migrations, oldest first', () => {
    expect(PACKAGE_MIGRATIONS.map((m) => m.tag).slice(0, 2)).toEqual([
      '0000_idempotency_keys',
      '0001_idempotency_steps',
    ]);
    const whens = PACKAGE_MIGRATIONS.map((m) => m.when);
    expect(whens).toEqual([...whens].sort((a, b) => a - b));
  });
});

describe('the MySQL migrations carried in the code', () => {
  it('are drizzle/mysql/’s, entry for entry', () => {
    if (process.env.UPDATE_EMBEDDED_MIGRATIONS === '1') writeFileSync(MYSQL_MODULE, mysqlModuleText());
    expect(MYSQL_MIGRATIONS.map((m) => ({ ...m }))).toEqual(folder(MYSQL_FOLDER));
    expect(readFileSync(MYSQL_MODULE, 'utf8')).toBe(mysqlModuleText());
  });

  it('begin with both tables in one migration', () => {
    expect(MYSQL_MIGRATIONS[0]?.tag).toBe('0000_idempotency_keys');
    expect(MYSQL_MIGRATIONS[0]?.sql).toMatch(/CREATE TABLE `idempotency_steps`/);
  });
});

describe('the SQLite migrations carried in the code', () => {
  it('are drizzle/sqlite/’s, entry for entry', () => {
    const text = dialectModuleText('sqlite', 'SQLite', 'SQLITE_MIGRATIONS');
    if (process.env.UPDATE_EMBEDDED_MIGRATIONS === '1') writeFileSync(SQLITE_MODULE, text);
    expect(SQLITE_MIGRATIONS.map((m) => ({ ...m }))).toEqual(folder(SQLITE_FOLDER));
    expect(readFileSync(SQLITE_MODULE, 'utf8')).toBe(text);
  });
});

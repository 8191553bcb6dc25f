import { IdempotencyConfigError } from '../../core/idempotency-error.js';
import { describeValue } from '../../core/options.js';
import type { PackageMigration } from './embedded-migrations.js';
import type { MigrateIdempotencyKeysOptions } from './migrate.js';

// A dialect's package migrations and its journal: which to apply, from the code
// or a folder (see migrateIdempotencyKeys in migrate.ts, and mysql/migrate.ts).

/** A migration to apply: this package's own, from the code or from the folder passed. */
export interface Migration {
  readonly tag: string;
  readonly when: number;
  readonly hash: string;
  readonly statements: readonly string[];
}

// Drizzle's migrator splits a migration's file at these markers (drizzle-orm/migrator).
export const BREAKPOINT = '--> statement-breakpoint';

const tagList = (migrations: readonly { tag: string }[]): string => migrations.map((m) => m.tag).join(', ');

/**
 * This package's migrations, read from `folder`, which must begin with this
 * version's (`own`: the dialect's PACKAGE_MIGRATIONS): a folder of other migrations is never applied.
 */
export async function folderMigrations(
  migrationsFolder: string | URL,
  own: readonly PackageMigration[],
): Promise<readonly Migration[]> {
  // Node-only modules are loaded here, not at the top: the store in this entry also runs where there is no file system.
  const [{ existsSync, readFileSync }, { join }, { fileURLToPath }, { readMigrationFiles }] = await Promise.all([
    import('node:fs'),
    import('node:path'),
    import('node:url'),
    import('drizzle-orm/migrator'),
  ]);
  const folder = typeof migrationsFolder === 'string' ? migrationsFolder : fileURLToPath(migrationsFolder);
  const journalPath = join(folder, 'meta', '_journal.json');
  if (!existsSync(journalPath)) {
    throw new IdempotencyConfigError(
      `migrateIdempotencyKeys: ${folder} holds no migrations (meta/_journal.json is missing). Point \`migrationsFolder\` at trpc-idempotency's drizzle/ folder, or leave it out: this package carries its migrations in its code.`,
    );
  }
  let migrations: Migration[];
  try {
    const entries = (JSON.parse(readFileSync(journalPath, 'utf8')) as { entries: { tag: string }[] }).entries;
    migrations = readMigrationFiles({ migrationsFolder: folder }).map((m, i) => ({
      tag: String(entries[i]?.tag),
      when: m.folderMillis,
      hash: m.hash,
      statements: m.sql,
    }));
  } catch (error) {
    throw new IdempotencyConfigError(
      `migrateIdempotencyKeys: the migrations in ${folder} cannot be read: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }
  for (const [i, expected] of own.entries()) {
    const found = migrations[i];
    if (found?.hash === expected.hash && found.when === expected.when) continue;
    const what =
      found === undefined
        ? `it ends before ${expected.tag}`
        : found.tag === expected.tag
          ? `its ${expected.tag} differs from this version's (another SQL text or \`when\`)`
          : `its entry ${i} is ${found.tag}, where this package has ${expected.tag}`;
    throw new IdempotencyConfigError(
      `migrateIdempotencyKeys: ${folder} is not trpc-idempotency's migrations folder, or not of this version: ${what}. \`migrationsFolder\` must begin with this version's migrations (${tagList(own)}), unchanged, and may add later ones of this package; your application's own migrations are not applied here. Leave it out to apply the migrations carried in this package's code.`,
    );
  }
  return migrations;
}

/**
 * What to apply, from the journal's rows: the package's migrations after the
 * ones it records. A row is one of the package's migrations when its hash or
 * its `created_at` is that migration's (Drizzle's migrator identifies a
 * migration by `created_at`). Throws, before anything is applied, when the
 * journal holds a row of no package migration (an application's migration,
 * recorded here by earlier versions when a bundle found the application's
 * drizzle/ folder), unless it comes after all of this version's migrations,
 * all recorded, as a later version's would after a rollback; and when it
 * records a migration but not an earlier one.
 */
export function pending(
  migrations: readonly Migration[],
  rows: readonly Record<string, unknown>[],
  journalName: string,
): readonly Migration[] {
  const recorded = new Set<number>();
  const foreign: { id: string; createdAt: number | undefined; hash: string }[] = [];
  for (const row of rows) {
    const createdAt = row.created_at === null || row.created_at === undefined ? undefined : Number(row.created_at);
    const index = migrations.findIndex((m) => m.hash === row.hash || m.when === createdAt);
    if (index >= 0) recorded.add(index);
    else foreign.push({ id: String(row.id), createdAt, hash: String(row.hash) });
  }
  let done = 0;
  while (recorded.has(done)) done++;
  const missing = migrations.slice(done);
  const latest = Math.max(...recorded);
  if (foreign.length === 0 && latest > done) {
    const [skipped, later] = [migrations[done]!, migrations[latest]!];
    throw new IdempotencyConfigError(
      `migrateIdempotencyKeys: the journal ${journalName} records ${later.tag} but not the earlier ${skipped.tag}: it was edited by hand or by another tool. Nothing was applied. If the database has what ${skipped.tag} creates, record it (insert into ${journalName} (hash, created_at) values ('${skipped.hash}', ${skipped.when})); otherwise delete the later entries and what they created. Then call migrateIdempotencyKeys again.`,
    );
  }
  if (foreign.length === 0) return missing;
  const newest = migrations.at(-1)?.when ?? Number.NEGATIVE_INFINITY;
  const lastOwnId = Math.max(
    ...rows.filter((r) => !foreign.some((f) => f.id === String(r.id))).map((r) => Number(r.id)),
    Number.NEGATIVE_INFINITY,
  );
  const fromLaterVersion = (f: (typeof foreign)[number]) =>
    f.createdAt !== undefined && f.createdAt > newest && Number(f.id) > lastOwnId;
  if (missing.length === 0 && foreign.every(fromLaterVersion)) return [];
  const n = foreign.length;
  const entries = foreign
    .map((f) => `id ${f.id} (created_at ${f.createdAt ?? 'null'}, hash ${f.hash.slice(0, 12)}...)`)
    .join(', ');
  const them = n === 1 ? 'it' : 'them';
  throw new IdempotencyConfigError(
    `migrateIdempotencyKeys: the journal ${journalName} holds ${n} ${n === 1 ? 'entry that is' : 'entries that are'} not one of trpc-idempotency's migrations: ${entries}` +
      (missing.length > 0
        ? `; this package's ${tagList(missing)} ${missing.length === 1 ? 'is' : 'are'} not recorded`
        : `, before or among this package's own`) +
      `. Nothing was applied. Versions up to 0.2.0, bundled into an application, could apply the application's own drizzle/ migrations and record them here. Check that ${n === 1 ? 'it is' : 'they are'} your application's (applied, and recorded by your own migrator), delete ${them} from this journal (delete from ${journalName} where id in (${foreign.map((f) => f.id).join(', ')})), then call migrateIdempotencyKeys again: it applies this package's migrations that are not recorded.`,
  );
}

/**
 * The options of migrateIdempotencyKeys on a dialect whose journal lives in the connection's database (MySQL,
 * SQLite): `migrationsFolder` and `migrationsTable`, checked.
 */
export function journalOptions(
  options: MigrateIdempotencyKeysOptions,
  { dialect, maxLength, folder }: { dialect: string; maxLength: number; folder: string },
): { table: string; migrationsFolder: string | URL | undefined } {
  if (options === null || typeof options !== 'object') {
    throw new IdempotencyConfigError(
      `migrateIdempotencyKeys: \`options\` must be an object, got ${describeValue(options)}.`,
    );
  }
  const unknown = Object.keys(options).filter((key) => key !== 'migrationsFolder' && key !== 'migrationsTable');
  if (unknown.length > 0) {
    throw new IdempotencyConfigError(
      `migrateIdempotencyKeys: ${unknown.map((k) => `\`${k}\``).join(', ')} ${unknown.length > 1 ? 'are not options' : 'is not an option'} on ${dialect}; the options are \`migrationsFolder\` and \`migrationsTable\` (the journal lives in the connection's database).`,
    );
  }
  const table = options.migrationsTable ?? '__trpc_idempotency_migrations';
  if (typeof table !== 'string' || table.length === 0 || table.length > maxLength || table.includes('\0')) {
    throw new IdempotencyConfigError(
      `migrateIdempotencyKeys: \`migrationsTable\` must be a non-empty name without NUL characters, of at most ${maxLength} characters, got ${describeValue(table)}. Leave it out to use '__trpc_idempotency_migrations'.`,
    );
  }
  const { migrationsFolder } = options;
  if (
    migrationsFolder !== undefined &&
    !(typeof migrationsFolder === 'string' && migrationsFolder.length > 0) &&
    !(migrationsFolder instanceof URL && migrationsFolder.protocol === 'file:')
  ) {
    throw new IdempotencyConfigError(
      `migrateIdempotencyKeys: \`migrationsFolder\` must be a path or a file: URL (this package's ${folder}), got ${describeValue(migrationsFolder)}. Leave it out to apply the migrations carried in this package's code.`,
    );
  }
  return { table, migrationsFolder };
}

/**
 * The CLI's commands, on `idempotencyAdmin` and the stores' own methods:
 * each checks its flags (usage errors before any connection), connects,
 * answers in words or, with `--json`, as one JSON document on stdout, closes
 * the connection, and returns its exit code.
 */
import { resolve } from 'node:path';
import { type InspectedRecord, idempotencyAdmin, type RecordRef } from '../core/admin.js';
import type { IdempotencyEvent } from '../core/events.js';
import { BIN, type CommandName, parseCount, parseDuration, type Values } from './args.js';
import { type Connection, connectRedis, type RedisTarget, type SqlTarget, type Target, targetOf } from './connect.js';
import { connectSql } from './connect-sql.js';
import { EXIT, type ExitCode, usageError } from './exit-codes.js';
import { absentHint, type Lookup, type Named, recordLines, releaseLines, statsLines, stuckLines } from './format.js';

/** Where the CLI writes: stdout for the answer, stderr for messages and events. */
export interface Io {
  stdout(text: string): void;
  stderr(text: string): void;
}

const str = (v: Values[string]): string | undefined => (typeof v === 'string' ? v : undefined);

/** What `--scope global` means: the procedure's `scope: 'global'`, which keeps its records under no scope. */
const GLOBAL_SCOPE = 'global';

/** The record the flags name. @throws CliError (exit 2). */
export function recordRef(command: string, values: Values): RecordRef & Named {
  const [scope, procedure, key, id] = [str(values.scope), str(values.procedure), str(values.key), str(values.id)];
  if (id !== undefined) {
    if (scope !== undefined || procedure !== undefined || key !== undefined) {
      throw usageError(`${command}: name the record by --id, or by --procedure and --key (and --scope), not both.`);
    }
    if (id === '') throw usageError(`${command}: --id is empty.`);
    return { id };
  }
  const missing = [procedure === undefined && '--procedure P', key === undefined && '--key K'].filter(Boolean);
  if (missing.length > 0) {
    throw usageError(
      `${command}: missing ${missing.join(' and ')}: name the record with --procedure P --key K (and --scope S when the procedure has a scope), or --id ID.`,
    );
  }
  if (scope === GLOBAL_SCOPE) return { procedure: procedure!, key: key!, global: true };
  return scope === undefined ? { procedure: procedure!, key: key! } : { scope, procedure: procedure!, key: key! };
}

const connect = (target: Target, table = true): Promise<Connection> =>
  target.kind === 'redis' ? connectRedis(target) : connectSql(target, table);

/** Where a record was looked up, for the lines of an absent one (and a message on stderr with --json). */
function lookupOf(io: Io, json: boolean, target: Target, conn: Connection, rec: InspectedRecord, named: Named): Lookup {
  const lookup: Lookup = { where: conn.where, store: target.kind };
  if (json && rec.state === 'absent') {
    const hint = absentHint(rec, named, lookup);
    io.stderr(`${BIN}: no record ${rec.id} at ${lookup.where}${hint === undefined ? '.' : `. ${hint}`}`);
  }
  return lookup;
}

/** Runs `fn` on a connection to `target`, closed whatever happens. */
async function withStore<T>(target: Target, fn: (conn: Connection) => Promise<T>): Promise<T> {
  const conn = await connect(target);
  try {
    return await fn(conn);
  } finally {
    await conn.close();
  }
}

const print = (io: Io, json: boolean, doc: unknown, lines: () => string[]) =>
  io.stdout(json ? JSON.stringify(doc, null, 2) : lines().join('\n'));

type Command = (values: Values, io: Io) => Promise<ExitCode>;

const inspect: Command = async (values, io) => {
  const ref = recordRef('inspect', values);
  const target = targetOf('inspect', values);
  const json = values.json === true;
  return withStore(target, async (conn) => {
    const rec = await idempotencyAdmin({ store: conn.store }).inspect(ref, { body: values.body === true });
    const lookup = lookupOf(io, json, target, conn, rec, ref);
    print(io, json, rec, () => recordLines(rec, ref, lookup));
    return rec.state === 'absent' ? EXIT.absent : EXIT.ok;
  });
};

const release: Command = async (values, io) => {
  const ref = recordRef('release', values);
  const target = targetOf('release', values);
  const json = values.json === true;
  const [confirm, force, steps, outcome] = [
    values.confirm === true,
    values.force === true,
    values.steps === true,
    values.outcome === true,
  ];
  const token = str(values.token);
  return withStore(target, async (conn) => {
    const { store } = conn;
    const events: IdempotencyEvent[] = [];
    const admin = idempotencyAdmin({
      store,
      onEvent: (event) => {
        events.push(event);
        io.stderr(JSON.stringify(event));
      },
    });
    const result = await admin.release(ref, { confirm, force, steps, outcome, token });
    const doc = events[0] === undefined ? result : { ...result, event: events[0] };
    const lookup = lookupOf(io, json, target, conn, result.record, ref);
    print(io, json, doc, () => [...recordLines(result.record, ref, lookup), '', ...releaseLines(result, steps)]);
    if (result.done) return EXIT.ok;
    return {
      absent: EXIT.absent,
      unconfirmed: EXIT.refused,
      live: EXIT.refused,
      outcome: EXIT.refused,
      changed: EXIT.changed,
    }[result.reason];
  });
};

const stuck: Command = async (values, io) => {
  const olderThan = parseDuration('older-than', str(values['older-than']) ?? '5m');
  const max = values.max === undefined ? undefined : parseCount('max', str(values.max)!);
  const procedure = str(values.procedure);
  const target = targetOf('stuck', values);
  const json = values.json === true;
  return withStore(target, async ({ store }) => {
    const result = await idempotencyAdmin({ store }).stuck({ olderThan, procedure, max });
    const doc = { ...result, olderThan };
    // relative times ("claimed 4m ago") against the store's clock, which the result carries
    print(io, json, doc, () => stuckLines(doc, result.time));
    return EXIT.ok;
  });
};

const stats: Command = async (values, io) => {
  const max = values.max === undefined ? undefined : parseCount('max', str(values.max)!);
  const procedure = str(values.procedure);
  const target = targetOf('stats', values);
  const json = values.json === true;
  return withStore(target, async ({ store }) => {
    const result = await idempotencyAdmin({ store }).stats({ procedure, max });
    print(io, json, result, () => statsLines(result));
    return EXIT.ok;
  });
};

/** The SQL database the flags name (migrate, purge). @throws CliError (exit 2). */
const sqlTargetOf = (command: string, values: Values) => targetOf(command, values, 'sql') as SqlTarget;

/** The migrations this package carries for a dialect, and where the table went, once migrated. */
async function migrated(target: SqlTarget, query: (text: string) => Promise<Record<string, unknown>[]>) {
  if (target.kind === 'mysql') {
    const { MYSQL_MIGRATIONS } = await import('../stores/drizzle/mysql/embedded-migrations.js');
    return { migrations: MYSQL_MIGRATIONS, at: { database: target.database }, where: `database ${target.database}` };
  }
  if (target.kind === 'sqlite') {
    const { SQLITE_MIGRATIONS } = await import('../stores/drizzle/sqlite/embedded-migrations.js');
    const file = resolve(target.path);
    return { migrations: SQLITE_MIGRATIONS, at: { file }, where: `the file ${file}` };
  }
  const { PACKAGE_MIGRATIONS } = await import('../stores/drizzle/embedded-migrations.js');
  const [row] = await query("select to_regclass('idempotency_keys')::text as table, current_schema() as schema");
  // undefined: the journal records the migrations, but the table is not on this connection's search_path
  const found = row?.table === null || row?.table === undefined ? undefined : String(row.table);
  return {
    migrations: PACKAGE_MIGRATIONS,
    at: { table: found, schema: row?.schema },
    where: found === undefined ? undefined : `schema ${String(row?.schema)}`,
  };
}

const migrate: Command = async (values, io) => {
  const target = sqlTargetOf('migrate', values);
  const migrationsSchema = str(values['migrations-schema']);
  const migrationsTable = str(values['migrations-table']);
  if (target.kind !== 'postgresql' && migrationsSchema !== undefined) {
    throw usageError(
      `migrate: --migrations-schema is for PostgreSQL; on ${target.kind === 'mysql' ? "MySQL the journal is in the URL's database" : 'SQLite the journal is in the file'}, beside the table: leave it out (--migrations-table names it).`,
    );
  }
  const json = values.json === true;
  const conn = await connectSql(target, false);
  try {
    const { migrateIdempotencyKeys } = await import('../stores/drizzle/migrate.js');
    const options = {
      ...(migrationsSchema === undefined ? {} : { migrationsSchema }),
      ...(migrationsTable === undefined ? {} : { migrationsTable }),
    };
    const { applied } = await migrateIdempotencyKeys(conn.db as Parameters<typeof migrateIdempotencyKeys>[0], options);
    const { migrations, at, where } = await migrated(target, conn.query);
    const table = migrationsTable ?? '__trpc_idempotency_migrations';
    const journal = target.kind === 'postgresql' ? `${migrationsSchema ?? 'drizzle'}.${table}` : table;
    const tags = migrations.slice(migrations.length - applied).map((m) => m.tag);
    if (where === undefined) {
      io.stderr(
        `trpc-idempotency: the journal ${journal} records the migrations, but there is no idempotency_keys table on this connection's search_path${target.kind === 'postgresql' && target.schema !== undefined ? ` (schema ${target.schema})` : ''}: it was migrated for another schema. Give each schema its own journal: --migrations-schema ${(target.kind === 'postgresql' && target.schema) || 'S'}.`,
      );
      return EXIT.failure;
    }
    const doc = { applied, migrations: tags, table: 'idempotency_keys', ...at, journal };
    print(io, json, doc, () => [
      applied === 0
        ? `Up to date: no migration applied (journal ${journal}).`
        : `Applied ${applied} migration${applied === 1 ? '' : 's'}: ${tags.join(', ')} (journal ${journal}).`,
      `The idempotency_keys table is in ${where}.`,
    ]);
    return EXIT.ok;
  } finally {
    await conn.close();
  }
};

const purge: Command = async (values, io) => {
  const batchSize =
    values['batch-size'] === undefined ? undefined : parseCount('batch-size', str(values['batch-size'])!);
  const maxBatches =
    values['max-batches'] === undefined ? undefined : parseCount('max-batches', str(values['max-batches'])!);
  const target = sqlTargetOf('purge', values);
  const json = values.json === true;
  const conn = await connectSql(target, true);
  try {
    const started = performance.now();
    const purged = await conn.store.purgeExpired({
      ...(batchSize === undefined ? {} : { batchSize }),
      ...(maxBatches === undefined ? {} : { maxBatches }),
    });
    const ms = Math.round(performance.now() - started);
    print(io, json, { purged, ms }, () => [
      `Purged ${purged} expired row${purged === 1 ? '' : 's'} (records, then steps) in ${ms} ms, at ${conn.where}.`,
    ]);
    return EXIT.ok;
  } finally {
    await conn.close();
  }
};

const initialize: Command = async (values, io) => {
  const target = targetOf('initialize', values, 'redis') as RedisTarget;
  const json = values.json === true;
  const conn = await connectRedis(target, true);
  try {
    const { written } = await conn.store.initialize();
    print(io, json, { written, prefix: target.prefix }, () => [
      written === 0
        ? `The restart fence's markers were all there already (prefix ${target.prefix}): nothing written.`
        : `Wrote ${written} restart fence marker${written === 1 ? '' : 's'} (prefix ${target.prefix}) at ${conn.where}.`,
    ]);
    return EXIT.ok;
  } finally {
    await conn.close();
  }
};

export const RUN: Record<CommandName, Command> = { inspect, release, stuck, stats, migrate, purge, initialize };

/**
 * The command line: the commands, their flags, their `--help`, and the
 * parsing of values (durations, counts). Flags are parsed with `node:util`'s
 * `parseArgs`, built into Node (>= 18.3): the CLI adds no runtime dependency.
 */
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { EXIT_CODES_HELP, usageError } from './exit-codes.js';

export const BIN = 'trpc-idempotency';

type Options = NonNullable<ParseArgsConfig['options']>;

const HELP: Options = { help: { type: 'boolean', short: 'h' } };
const JSON_OUT: Options = { json: { type: 'boolean' } };
const REDIS: Options = {
  redis: { type: 'string', multiple: true },
  cluster: { type: 'boolean' },
  'redis-client': { type: 'string' },
  prefix: { type: 'string' },
};
const DATABASE: Options = {
  'database-url': { type: 'string' },
  schema: { type: 'string' },
  'sqlite-client': { type: 'string' },
};
const RECORD: Options = {
  scope: { type: 'string' },
  procedure: { type: 'string' },
  key: { type: 'string' },
  id: { type: 'string' },
};

/**
 * Where the store URLs are read from when no flag gives them (a flag wins): out of `ps` and the
 * shell's history. Named after the package and the flags, not `REDIS_URL` or `DATABASE_URL`, which an
 * application's environment often sets for another store (a cache, the main database).
 */
export const URL_ENV = { redis: 'TRPC_IDEMPOTENCY_REDIS_URL', database: 'TRPC_IDEMPOTENCY_DATABASE_URL' } as const;

const STORE_HEADING = 'Store (the options the application gives its store):';

const REDIS_HELP = `  --redis URL            Redis (redis://[user:password@]host:port[/db], rediss:// for TLS),
                         or set ${URL_ENV.redis}
  --cluster              a Redis Cluster: the --redis URLs are seed nodes (repeat --redis, or separate with commas)
  --redis-client NAME    ioredis or node-redis (default: ioredis if installed, else node-redis)
  --prefix P             redisStore's prefix (default idem:)`;

const DATABASE_HELP = `  --database-url URL     a SQL database, through drizzle-orm, or set ${URL_ENV.database}:
                           PostgreSQL   postgres://user:password@host:port/db (pg)
                           MySQL        mysql://user:password@host:port/db (mysql2; MariaDB too)
                           SQLite       sqlite:path or file:path (./app.db; sqlite:///abs/app.db), an existing
                                        file (migrate creates it)
  --sqlite-client NAME   better-sqlite3 or libsql (@libsql/client) (default: better-sqlite3 if installed, else libsql)`;

/** What the environment variables are for, after the flags of the stores a command takes. */
const ENV_HELP = `A URL set in the environment keeps its password out of ps and the shell's history; a flag wins over it.`;

const CONNECT_HELP = `${STORE_HEADING}
${REDIS_HELP}
${DATABASE_HELP}
  --schema S             PostgreSQL: the schema of the idempotency_keys table: the connection's search_path
                         is set to S (drizzleStore uses the connection's search_path; default: the server's)
${ENV_HELP}
With both variables set, pass --redis URL or --database-url URL, or empty one for the command.`;

const RECORD_HELP = `Record (named as the layer names it, or by its id):
  --procedure P          the procedure path (payments.create)
  --key K                the client's Idempotency-Key
  --scope S              the procedure's scope (a user or tenant id), when it has one; --scope global
                         (as scope: 'global', or a scope that returned null) is no scope, as leaving it out
  --id ID                the record's id instead (as stuck lists it)`;

const MAX_HELP = `  --max N                read at most N records in all (default 100000): rows, or on Redis the keys SCAN walks,
                         other data's too; the output says when it stopped short`;

const COMMON_HELP = `  --json                 one JSON document on stdout, nothing else there (messages go to stderr)
  -h, --help             this help`;

interface CommandSpec {
  options: Options;
  summary: string;
  help: string;
}

export type CommandName = 'inspect' | 'release' | 'stuck' | 'stats' | 'migrate' | 'purge' | 'initialize';

export const COMMANDS: Record<CommandName, CommandSpec> = {
  inspect: {
    options: { ...HELP, ...JSON_OUT, ...REDIS, ...DATABASE, ...RECORD, body: { type: 'boolean' } },
    summary: 'read one record: its state, claim, lease, outcome size, steps',
    help: `Usage: ${BIN} inspect (--redis URL | --database-url URL) --procedure P --key K [--scope S] [--body] [--json]

Reads one record without changing it: its state (absent, in_progress, completed,
failed), when it was claimed, by which attempt, its lease and when it was last
renewed (a claim renewed less than half a lease ago has a live holder),
the stored outcome's size, and the steps recorded under it.

  --body                 print the stored outcome too (it may hold personal data)
${COMMON_HELP}

${RECORD_HELP}

${CONNECT_HELP}

Example:
  ${BIN} inspect --redis redis://127.0.0.1:6379 --prefix idem: --scope u1 --procedure pay --key K --json

${EXIT_CODES_HELP}`,
  },
  release: {
    options: {
      ...HELP,
      ...JSON_OUT,
      ...REDIS,
      ...DATABASE,
      ...RECORD,
      confirm: { type: 'boolean' },
      force: { type: 'boolean' },
      steps: { type: 'boolean' },
      outcome: { type: 'boolean' },
      token: { type: 'string' },
    },
    summary: 'give back a held claim, or forget a stored outcome (dry run without --confirm)',
    help: `Usage: ${BIN} release (--redis URL | --database-url URL) --procedure P --key K [--scope S] [--confirm] [--force] [--outcome] [--token T] [--steps] [--json]

Gives back a claim that is held (a stuck request: the next retry with the key
runs the operation), or forgets a stored outcome (the next retry runs the
operation again instead of replaying it).

Without --confirm it is a dry run: it says what it would delete and the risk,
deletes nothing and exits with 3.

A claim whose holder renewed it less than half a lease ago (a running holder
renews it every lockTtl/3), or whose renewal time the store does not
know, is refused unless --force: releasing a claim whose holder is still alive
can run the operation twice. A request that hangs while its process still
renews its claim keeps the key for as long as it hangs (--force frees it); a
claim whose holder died is no longer renewed: it expires by itself within
lockTtl, and --confirm frees it at once.
Without --force, a claim renewed after the read (its holder came back) is kept
(exit 5). A stored outcome is forgotten only with --outcome.

  --confirm              really delete
  --force                release a claim whose holder looks alive (implies --confirm)
  --outcome              forget a stored outcome (completed or failed): required for one, so a
                         claim that completed after you looked is never forgotten by mistake
  --token T              only if the record still carries token T (the attempt you inspected)
  --steps                delete the recorded steps too: the next attempt runs every step again
                         (also works on an absent record that has steps)
${COMMON_HELP}

Every deletion is an event (released, reason operator or operator_forced; forgotten),
written to stderr as one JSON line, and with --json as "event" in the output.

${RECORD_HELP}

${CONNECT_HELP}

Examples:
  ${BIN} release --redis redis://127.0.0.1:6379 --scope u1 --procedure pay --key K
  ${BIN} release --redis redis://127.0.0.1:6379 --scope u1 --procedure pay --key K --force

${EXIT_CODES_HELP}`,
  },
  stuck: {
    options: {
      ...HELP,
      ...JSON_OUT,
      ...REDIS,
      ...DATABASE,
      'older-than': { type: 'string' },
      procedure: { type: 'string' },
      max: { type: 'string' },
    },
    summary: 'list the claims in progress taken at least --older-than ago',
    help: `Usage: ${BIN} stuck (--redis URL | --database-url URL) [--older-than 5m] [--procedure P] [--max N] [--json]

Lists the claims in progress taken at least --older-than ago, oldest first, with
their lease and whether their holder still renews them. A claim that is old and
still renewed is a live holder that hangs (release --force frees its key); one
that is no longer renewed expires by itself within its lockTtl.

  --older-than D         claims taken at least this long ago: 500ms, 30s, 5m, 2h, or a number of ms (default 5m)
  --procedure P          only this procedure's claims
${MAX_HELP}
${COMMON_HELP}

${CONNECT_HELP}

${EXIT_CODES_HELP}`,
  },
  stats: {
    options: {
      ...HELP,
      ...JSON_OUT,
      ...REDIS,
      ...DATABASE,
      procedure: { type: 'string' },
      max: { type: 'string' },
    },
    summary: 'count the live records by state and by procedure',
    help: `Usage: ${BIN} stats (--redis URL | --database-url URL) [--procedure P] [--max N] [--json]

Counts the live records by state (in_progress, completed, failed) and by procedure.

  --procedure P          only this procedure's records
${MAX_HELP}
${COMMON_HELP}

${CONNECT_HELP}

${EXIT_CODES_HELP}`,
  },
  migrate: {
    options: {
      ...HELP,
      ...JSON_OUT,
      ...DATABASE,
      ...REDIS, // refused with a message that says migrate is for the SQL databases
      'migrations-schema': { type: 'string' },
      'migrations-table': { type: 'string' },
    },
    summary: 'SQL databases: create or update the idempotency_keys table (migrateIdempotencyKeys)',
    help: `Usage: ${BIN} migrate --database-url URL [--schema S] [--migrations-schema S] [--migrations-table T] [--json]

Applies this package's migrations for the URL's database (migrateIdempotencyKeys from
trpc-idempotency/drizzle) and prints how many it applied (0: up to date). Safe while
instances start: it takes a lock (PostgreSQL: an advisory lock; MySQL: GET_LOCK; SQLite:
the write lock). On PostgreSQL, on a table of millions of rows, migration 0002 builds an
index that makes claims wait meanwhile: see docs/stores.md (Creating the table) first.
PostgreSQL: the table goes in the first schema of the search_path (--schema).
MySQL: in the URL's database. SQLite: in the file, created if it does not exist.

${DATABASE_HELP}
  --schema S             PostgreSQL: create the table in schema S (the connection's search_path)
  --migrations-schema S  PostgreSQL: the schema of the migrations journal (default drizzle, as
                         migrateIdempotencyKeys); with one table per schema, give each its own journal.
                         MySQL and SQLite keep the journal beside the table.
  --migrations-table T   the journal's table (default __trpc_idempotency_migrations)
${COMMON_HELP}

${EXIT_CODES_HELP}`,
  },
  purge: {
    options: {
      ...HELP,
      ...JSON_OUT,
      ...DATABASE,
      ...REDIS, // refused with a message that says purge is for the SQL databases
      'batch-size': { type: 'string' },
      'max-batches': { type: 'string' },
    },
    summary: 'SQL databases: delete expired rows and steps (purgeExpired)',
    help: `Usage: ${BIN} purge --database-url URL [--schema S] [--batch-size N] [--max-batches N] [--json]

Deletes expired records, then expired steps, in batches (drizzleStore's purgeExpired),
and prints how many rows went. Schedule it (cron). Redis expires its keys by itself.

${DATABASE_HELP}
  --schema S             PostgreSQL: the schema of the idempotency_keys table (the connection's search_path)
  --batch-size N         rows per statement (default 1000)
  --max-batches N        stop after N batches of each table (default: until none is left)
${COMMON_HELP}

${EXIT_CODES_HELP}`,
  },
  initialize: {
    options: { ...HELP, ...JSON_OUT, ...REDIS, ...DATABASE }, // --database-url: refused, initialize is for Redis
    summary: "Redis: write the restart fence's markers (once, on a new Redis)",
    help: `Usage: ${BIN} initialize --redis URL [--cluster] [--prefix P] [--json]

Writes the restart fence's markers where they are missing (one, or one per slot on a
Cluster): redisStore({ restartFence: true }).initialize(). Run it ONCE, on a new Redis,
as you run migrations, before the first request. Never run it after Redis lost its data
(an empty restart, a flush): that would tell the fence nothing was lost, and a claim
still running could then run a second time. Only for stores with restartFence: true.

${COMMON_HELP}

${STORE_HEADING}
${REDIS_HELP}
${ENV_HELP}

${EXIT_CODES_HELP}`,
  },
};

export const TOP_HELP = `Usage: ${BIN} <command> [flags]

Operator tools for trpc-idempotency's stores (Redis, Redis Cluster, PostgreSQL, MySQL/MariaDB, SQLite).

Commands:
${Object.entries(COMMANDS)
  .map(([name, spec]) => `  ${name.padEnd(12)} ${spec.summary}`)
  .join('\n')}

Run ${BIN} <command> --help for its flags. ${BIN} --version prints the version.
The store's URL: --redis URL or --database-url URL, or in the environment ${URL_ENV.redis}
or ${URL_ENV.database} (a flag wins).

Examples:
  ${BIN} inspect --redis redis://127.0.0.1:6379 --scope u1 --procedure pay --key K
  ${BIN} stuck --database-url postgres://127.0.0.1/app --older-than 5m
  ${BIN} purge --database-url sqlite:/var/lib/app/app.db
  ${BIN} release --redis redis://10.0.0.1:7000 --cluster --id 'u1:pay:K' --force

${EXIT_CODES_HELP}`;

/** Flag values, as parseArgs gives them. */
export type Values = Record<string, string | boolean | string[] | undefined>;

export type Parsed =
  | { kind: 'help'; text: string }
  | { kind: 'version' }
  | { kind: 'run'; command: CommandName; values: Values };

const isCommand = (name: string): name is CommandName => Object.hasOwn(COMMANDS, name);

/** Reads the command line. @throws CliError (exit 2) for a usage error. */
export function parseCommandLine(argv: readonly string[]): Parsed {
  const [first, ...rest] = argv;
  if (first === undefined || first === '--help' || first === '-h' || first === 'help') {
    const topic = first === 'help' ? rest[0] : undefined;
    if (topic !== undefined && isCommand(topic)) return { kind: 'help', text: COMMANDS[topic].help };
    return { kind: 'help', text: TOP_HELP };
  }
  if (first === '--version' || first === '-v') return { kind: 'version' };
  if (!isCommand(first)) {
    const what = first.startsWith('-') ? `the command comes first, not ${first}` : `no command ${first}`;
    throw usageError(`${what}. The commands: ${Object.keys(COMMANDS).join(', ')} (${BIN} --help).`);
  }
  const spec = COMMANDS[first];
  let values: Values;
  try {
    ({ values } = parseArgs({ args: [...rest], options: spec.options, strict: true, allowPositionals: false }) as {
      values: Values;
    });
  } catch (error) {
    // parseArgs's messages name the flag and what it expected; the help names the others.
    const message = error instanceof Error ? error.message : String(error);
    throw usageError(`${first}: ${message} (${BIN} ${first} --help lists its flags).`);
  }
  if (values.help === true) return { kind: 'help', text: spec.help };
  return { kind: 'run', command: first, values };
}

const UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A duration: 500ms, 30s, 5m, 2h, 1d, or a number of ms. @throws CliError (exit 2). */
export function parseDuration(flag: string, text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(text.trim());
  if (match === null) {
    throw usageError(
      `--${flag} ${JSON.stringify(text)} is not a duration: pass 500ms, 30s, 5m, 2h, 1d or a number of ms.`,
    );
  }
  return Math.round(Number(match[1]) * UNITS[match[2] ?? 'ms']!);
}

/** A whole number of at least 1. @throws CliError (exit 2). */
export function parseCount(flag: string, text: string): number {
  if (!/^\d+$/.test(text.trim()) || Number(text) < 1 || !Number.isSafeInteger(Number(text))) {
    throw usageError(`--${flag} ${JSON.stringify(text)} is not a whole number of at least 1.`);
  }
  return Number(text);
}

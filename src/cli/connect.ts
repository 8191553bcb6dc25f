/**
 * Connecting the CLI to a store, with the stores' own code (redisStore,
 * drizzleStore): the same key layout and statements as the application's.
 * The drivers are the application's peer dependencies, imported only when
 * asked for; a missing one is named, with what to install. Connections fail
 * within a few seconds rather than retrying for ever, and `close` ends them
 * all, so the process exits by itself. The SQL databases are in connect-sql.ts.
 */
import { fileURLToPath } from 'node:url';
import type { IdempotencyStore } from '../core/store.js';
import type { RedisStore } from '../stores/redis/store.js';
import { BIN, URL_ENV, type Values } from './args.js';
import { CliError, EXIT, usageError } from './exit-codes.js';

/** How long a connection may take before the CLI gives up (ms). */
export const CONNECT_TIMEOUT = 3_000;
/** How long one command may take (ms): a listing's page is one command, bounded by its size. */
const COMMAND_TIMEOUT = 15_000;

export interface RedisTarget {
  kind: 'redis';
  urls: string[];
  cluster: boolean;
  client: 'ioredis' | 'node-redis' | undefined;
  prefix: string;
}

export interface PostgresTarget {
  kind: 'postgresql';
  url: string;
  schema: string | undefined;
}

export interface MysqlTarget {
  kind: 'mysql';
  url: string;
  /** The URL's database, where the table is. */
  database: string;
}

export interface SqliteTarget {
  kind: 'sqlite';
  /** The database file, as the URL names it. */
  path: string;
  client: 'better-sqlite3' | 'libsql' | undefined;
}

export type SqlTarget = PostgresTarget | MysqlTarget | SqliteTarget;
export type Target = RedisTarget | SqlTarget;

export interface Connection {
  /** The store, as the application makes it. */
  store: IdempotencyStore;
  /** Where it is, for messages (passwords hidden). */
  where: string;
  close(): Promise<void>;
}

export interface RedisConnection extends Connection {
  store: RedisStore;
}

/** A URL with its password hidden, for messages: in its user part and in its query (`?password=`). */
export function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== '') u.password = '***';
    for (const name of [...u.searchParams.keys()]) {
      if (/pass|secret|token|key/i.test(name)) u.searchParams.set(name, '***');
    }
    return u.toString();
  } catch {
    return url.replace(/\/\/([^:@/]*):[^@/]*@/, '//$1:***@');
  }
}

const str = (v: Values[string]): string | undefined => (typeof v === 'string' ? v : undefined);

/** The stores a command takes: any, Redis only (initialize), or a SQL database only (migrate, purge). */
type Want = 'any' | 'redis' | 'sql';

/**
 * The store's URL and where it came from: the flags, or when neither is given, the environment
 * ({@link URL_ENV}). @throws CliError (exit 2).
 */
function storeUrls(
  command: string,
  values: Values,
  want: Want,
  env: NodeJS.ProcessEnv,
): { redis: string[]; redisFrom: string; databaseUrl: string | undefined; databaseFrom: string } {
  const redis = (values.redis as string[] | undefined) ?? [];
  const databaseUrl = str(values['database-url']);
  if (redis.length > 0 && databaseUrl !== undefined) {
    throw usageError(`${command}: pass --redis or --database-url, not both.`);
  }
  const flags = { redis, redisFrom: '--redis', databaseUrl, databaseFrom: '--database-url' };
  if (redis.length > 0 || databaseUrl !== undefined) return flags;
  // An empty variable is no variable: `TRPC_IDEMPOTENCY_DATABASE_URL= trpc-idempotency ...` leaves it out.
  const fromEnv = { redis: env[URL_ENV.redis] || undefined, database: env[URL_ENV.database] || undefined };
  const useRedis = fromEnv.redis !== undefined && want !== 'sql';
  const useDatabase = fromEnv.database !== undefined && want !== 'redis';
  if (useRedis && useDatabase) {
    throw usageError(
      `${command}: both ${URL_ENV.redis} and ${URL_ENV.database} are set: say which store, with --redis URL or --database-url URL, or empty one for this command (${URL_ENV.database}= ${BIN} ${command} ...).`,
    );
  }
  if (useRedis) return { ...flags, redis: [fromEnv.redis!], redisFrom: URL_ENV.redis };
  if (useDatabase) return { ...flags, databaseUrl: fromEnv.database, databaseFrom: URL_ENV.database };
  throw usageError(
    want === 'redis'
      ? `${command} is for Redis: pass --redis URL (or set ${URL_ENV.redis}).`
      : want === 'sql'
        ? sqlOnly(command)
        : `${command}: pass the store: --redis URL (with --cluster for a Redis Cluster) or --database-url URL, or set ${URL_ENV.redis} or ${URL_ENV.database}.`,
  );
}

const sqlOnly = (command: string) =>
  `${command} is for the SQL databases (PostgreSQL, MySQL/MariaDB, SQLite): pass --database-url URL (or set ${URL_ENV.database}).`;

/**
 * Which store the flags name, or the environment when no flag gives a URL.
 * `want` restricts it (migrate and purge are for the SQL databases,
 * initialize for Redis). @throws CliError (exit 2).
 */
export function targetOf(command: string, values: Values, want: Want = 'any', env = process.env): Target {
  const { redis: redisFlags, redisFrom, databaseUrl, databaseFrom } = storeUrls(command, values, want, env);
  if (databaseUrl !== undefined) {
    if (want === 'redis') throw usageError(`${command} is for Redis: pass --redis URL (or set ${URL_ENV.redis}).`);
    for (const flag of ['cluster', 'redis-client', 'prefix'] as const) {
      if (values[flag] !== undefined)
        throw usageError(`${command}: --${flag} is for Redis; with ${databaseFrom}, leave it out.`);
    }
    return sqlTarget(command, values, databaseUrl, databaseFrom);
  }
  if (want === 'sql') throw usageError(sqlOnly(command));
  for (const flag of ['schema', 'sqlite-client'] as const) {
    if (values[flag] !== undefined) {
      throw usageError(`${command}: --${flag} is for --database-url; for Redis, --prefix names the store's keys.`);
    }
  }
  const urls = redisFlags.flatMap((flag) => flag.split(',')).map((u) => u.trim());
  for (const url of urls) {
    if (!/^rediss?:\/\/[^/]/.test(url)) {
      throw usageError(`${command}: ${redisFrom} ${JSON.stringify(redact(url))} is not a redis:// or rediss:// URL.`);
    }
  }
  const cluster = values.cluster === true;
  if (urls.length > 1 && !cluster) {
    throw usageError(`${command}: several Redis URLs are seed nodes of a Cluster: add --cluster, or pass one URL.`);
  }
  const client = str(values['redis-client']);
  if (client !== undefined && client !== 'ioredis' && client !== 'node-redis') {
    throw usageError(`${command}: --redis-client ${JSON.stringify(client)}: pass ioredis or node-redis.`);
  }
  const prefix = str(values.prefix) ?? 'idem:';
  if (/[{}]/.test(prefix))
    throw usageError(`${command}: --prefix must not contain braces (the store adds the hash tag).`);
  return { kind: 'redis', urls, cluster, client, prefix };
}

const DATABASE_URLS =
  'postgres://user:password@host:port/db, mysql://user:password@host:port/db, or sqlite:path (file:path) for a SQLite file';

/**
 * The SQL database a --database-url names: PostgreSQL, MySQL/MariaDB or a
 * SQLite file, with the flags that only some of them take. @throws CliError (exit 2).
 */
function sqlTarget(command: string, values: Values, url: string, from: string): SqlTarget {
  const shown = `${from} ${JSON.stringify(redact(url))}`;
  const schema = str(values.schema);
  const sqliteClient = str(values['sqlite-client']);
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  const dialect =
    scheme === 'postgres' || scheme === 'postgresql'
      ? 'PostgreSQL'
      : scheme === 'mysql'
        ? 'MySQL'
        : scheme === 'sqlite' || scheme === 'file'
          ? 'SQLite'
          : undefined;
  if (dialect === undefined) throw usageError(`${command}: ${shown} is not a database URL: pass ${DATABASE_URLS}.`);
  if (dialect !== 'PostgreSQL' && schema !== undefined) {
    throw usageError(
      `${command}: --schema is for PostgreSQL; on ${dialect} the table is in ${dialect === 'MySQL' ? "the URL's database (mysql://host/db)" : 'the file itself'}: leave --schema out.`,
    );
  }
  if (dialect !== 'SQLite' && sqliteClient !== undefined) {
    throw usageError(`${command}: --sqlite-client is for a SQLite file (sqlite:path); with ${dialect}, leave it out.`);
  }
  if (dialect === 'PostgreSQL') {
    if (!/^postgres(ql)?:\/\/[^/]/.test(url)) {
      throw usageError(`${command}: ${shown} is not a postgres:// URL: pass postgres://user:password@host:port/db.`);
    }
    if (schema !== undefined && (schema.length === 0 || schema.includes('\0'))) {
      throw usageError(`${command}: --schema must be a schema name.`);
    }
    return { kind: 'postgresql', url, schema };
  }
  if (dialect === 'MySQL') {
    let database = '';
    try {
      const u = new URL(url);
      database = u.host === '' ? '' : decodeURIComponent(u.pathname.slice(1));
    } catch {}
    if (database === '' || database.includes('/')) {
      throw usageError(
        `${command}: ${shown} names no database: pass mysql://user:password@host:port/db (the database that holds the idempotency_keys table).`,
      );
    }
    return { kind: 'mysql', url, database };
  }
  if (sqliteClient !== undefined && sqliteClient !== 'better-sqlite3' && sqliteClient !== 'libsql') {
    throw usageError(`${command}: --sqlite-client ${JSON.stringify(sqliteClient)}: pass better-sqlite3 or libsql.`);
  }
  const path = sqlitePath(url);
  if (path === undefined) {
    throw usageError(
      `${command}: ${shown} names no SQLite file: pass sqlite:path or file:path (sqlite:./app.db, sqlite:/var/lib/app.db, file:///var/lib/app.db); an in-memory database would be empty.`,
    );
  }
  return { kind: 'sqlite', path, client: sqliteClient };
}

/** The file of `sqlite:path` or `file:path` (`sqlite:///abs`, `file:///abs` as URLs); undefined when none, or in memory. */
function sqlitePath(url: string): string | undefined {
  const rest = url.slice(url.indexOf(':') + 1);
  let path = rest;
  if (rest.startsWith('//')) {
    try {
      path = fileURLToPath(`file:${rest}`);
    } catch {
      return undefined;
    }
  }
  if (path === '' || path.includes('\0') || path.startsWith(':memory:')) return undefined;
  return path;
}

const isMissing = (error: unknown, name: string): boolean => {
  const code = (error as { code?: unknown } | null)?.code;
  return (
    (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') &&
    error instanceof Error &&
    error.message.includes(`'${name}`)
  );
};

/** Whether a peer dependency is installed here (it loads), to choose between two drivers. */
export async function installed(name: string, load: () => Promise<unknown>): Promise<boolean> {
  try {
    await load();
    return true;
  } catch (error) {
    if (isMissing(error, name)) return false;
    throw error;
  }
}

/** A peer dependency, imported now; missing, a message that says what to install. */
export async function peer<T>(name: string, load: () => Promise<T>, purpose: string, missing?: string): Promise<T> {
  try {
    return await load();
  } catch (error) {
    if (isMissing(error, name)) {
      throw new CliError(
        missing ??
          `${purpose} needs the package ${name}, which is not installed here: npm install ${name} (next to trpc-idempotency).`,
        EXIT.failure,
      );
    }
    throw error;
  }
}

export const message = (error: unknown): string => {
  if (error instanceof AggregateError && error.errors.length > 0) return message(error.errors[0]);
  return error instanceof Error ? error.message : String(error);
};

export function unreachable(what: string, where: string, error: unknown): CliError {
  return new CliError(`cannot reach ${what} at ${where}: ${message(error) || 'connection failed'}`, EXIT.failure);
}

/** Connects to Redis (single node or Cluster) with ioredis or node-redis, and makes the store on it. */
export async function connectRedis(target: RedisTarget, restartFence = false): Promise<RedisConnection> {
  const { redisStore } = await import('../stores/redis/store.js');
  const where = target.urls.map(redact).join(',') + (target.cluster ? ' (cluster)' : '');
  const what = target.cluster ? 'the Redis Cluster' : 'Redis';
  // ioredis if the project has it, node-redis otherwise
  const library = target.client ?? ((await installed('ioredis', () => import('ioredis'))) ? 'ioredis' : 'node-redis');
  let client: unknown;
  let close: () => Promise<void>;
  if (library === 'ioredis') {
    const mod = await peer('ioredis', () => import('ioredis'), '--redis-client ioredis');
    const { Redis, Cluster } = mod;
    const options = {
      lazyConnect: true,
      connectTimeout: CONNECT_TIMEOUT,
      commandTimeout: COMMAND_TIMEOUT,
      maxRetriesPerRequest: 1,
      // disconnect() after a failed connect waits this long for the socket (2 s by default, keeping the process up)
      disconnectTimeout: 100,
      retryStrategy: (times: number) => (times > 2 ? null : 100 * times),
    };
    let last: unknown;
    const c = target.cluster
      ? new Cluster(
          target.urls.map((url) => {
            const u = new URL(url);
            return { host: u.hostname, port: Number(u.port || 6379) };
          }),
          {
            lazyConnect: true,
            slotsRefreshTimeout: CONNECT_TIMEOUT,
            clusterRetryStrategy: (times: number) => (times > 2 ? null : 100 * times),
            redisOptions: { ...options, ...credentials(target.urls[0]!) },
          },
        )
      : new Redis(target.urls[0]!, options);
    c.on('error', (error: unknown) => {
      last = error;
    });
    // a Cluster's own error says only that no node answered; each node's says why
    let nodeError: unknown;
    c.on('node error', (error: unknown) => {
      nodeError = error;
    });
    try {
      await c.connect();
    } catch (error) {
      c.disconnect();
      if (target.cluster) {
        throw unreachable(what, where, `no seed node answered (${message(nodeError ?? last ?? error)})`);
      }
      throw unreachable(what, where, last ?? error);
    }
    client = c;
    close = async () => {
      await c.quit().catch(() => c.disconnect());
    };
  } else {
    const mod = await peer(
      'redis',
      () => import('redis'),
      '--redis-client node-redis',
      target.client === undefined
        ? '--redis needs a Redis client, and neither ioredis nor redis (node-redis) is installed here: npm install ioredis (or redis), next to trpc-idempotency.'
        : undefined,
    );
    const socket = {
      connectTimeout: CONNECT_TIMEOUT,
      reconnectStrategy: (retries: number, cause: Error) => (retries >= 2 ? cause : 100 * (retries + 1)),
    };
    const c = target.cluster
      ? mod.createCluster({
          rootNodes: target.urls.map((url) => ({ url })),
          // the nodes the cluster finds by itself get the seeds' credentials and TLS
          defaults: nodeRedisDefaults(target.urls[0]!, socket),
        })
      : mod.createClient({ url: target.urls[0]!, socket });
    let last: unknown;
    c.on('error', (error: unknown) => {
      last = error;
    });
    try {
      await c.connect();
    } catch (error) {
      await Promise.resolve(c.destroy()).catch(() => {});
      throw unreachable(what, where, last ?? error);
    }
    client = c;
    close = async () => {
      await c.close().catch(() => c.destroy());
    };
  }
  const store = redisStore({
    client: client as Parameters<typeof redisStore>[0]['client'],
    prefix: target.prefix,
    restartFence,
  });
  return {
    store,
    where: `${where}, prefix ${target.prefix}, ${library}`,
    close: async () => {
      await store.close().catch(() => {});
      await close();
    },
  };
}

/** node-redis's options for a Cluster's nodes, from a seed's URL: its credentials, and TLS for rediss://. */
function nodeRedisDefaults(url: string, socket: object) {
  const { username, password, tls } = credentials(url);
  return { socket: tls === undefined ? socket : { ...socket, tls: true as const }, username, password };
}

/** The username, password and TLS of a Redis URL, for the nodes an ioredis Cluster finds by itself. */
function credentials(url: string): { username?: string; password?: string; tls?: object } {
  const u = new URL(url);
  const out: { username?: string; password?: string; tls?: object } = {};
  if (u.username !== '') out.username = decodeURIComponent(u.username);
  if (u.password !== '') out.password = decodeURIComponent(u.password);
  if (u.protocol === 'rediss:') out.tls = {};
  return out;
}

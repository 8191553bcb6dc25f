/**
 * Connecting the CLI to a store, with the stores' own code (redisStore,
 * drizzleStore): the same key layout and statements as the application's.
 * The drivers are the application's peer dependencies, imported only when
 * asked for; a missing one is named, with what to install. Connections fail
 * within a few seconds rather than retrying for ever, and `close` ends them
 * all, so the process exits by itself.
 */
import type { IdempotencyStore } from '../core/store.js';
import type { RedisStore } from '../stores/redis/store.js';
import { BIN, URL_ENV, type Values } from './args.js';
import { CliError, EXIT, usageError } from './exit-codes.js';

/** How long a connection may take before the CLI gives up (ms). */
const CONNECT_TIMEOUT = 3_000;
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

export type Target = RedisTarget | PostgresTarget;

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

export interface PostgresConnection extends Connection {
  store: IdempotencyStore & { purgeExpired(options?: { batchSize?: number; maxBatches?: number }): Promise<number> };
  /** The Drizzle database (node-postgres), for migrations. */
  db: unknown;
  /** Runs one SQL query on the connection. */
  query(text: string): Promise<Record<string, unknown>[]>;
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

type Want = 'any' | 'redis' | 'postgresql';

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
  const fromEnv = { redis: env[URL_ENV.redis] || undefined, postgresql: env[URL_ENV.postgresql] || undefined };
  const useRedis = fromEnv.redis !== undefined && want !== 'postgresql';
  const usePostgres = fromEnv.postgresql !== undefined && want !== 'redis';
  if (useRedis && usePostgres) {
    throw usageError(
      `${command}: both ${URL_ENV.redis} and ${URL_ENV.postgresql} are set: say which store, with --redis URL or --database-url URL, or empty one for this command (${URL_ENV.postgresql}= ${BIN} ${command} ...).`,
    );
  }
  if (useRedis) return { ...flags, redis: [fromEnv.redis!], redisFrom: URL_ENV.redis };
  if (usePostgres) return { ...flags, databaseUrl: fromEnv.postgresql, databaseFrom: URL_ENV.postgresql };
  throw usageError(
    want === 'redis'
      ? `${command} is for Redis: pass --redis URL (or set ${URL_ENV.redis}).`
      : want === 'postgresql'
        ? `${command} is for PostgreSQL: pass --database-url URL (or set ${URL_ENV.postgresql}).`
        : `${command}: pass the store: --redis URL (with --cluster for a Redis Cluster) or --database-url URL, or set ${URL_ENV.redis} or ${URL_ENV.postgresql}.`,
  );
}

/**
 * Which store the flags name, or the environment when no flag gives a URL.
 * `want` restricts it (migrate and purge are for PostgreSQL, initialize for
 * Redis). @throws CliError (exit 2).
 */
export function targetOf(command: string, values: Values, want: Want = 'any', env = process.env): Target {
  const { redis: redisFlags, redisFrom, databaseUrl, databaseFrom } = storeUrls(command, values, want, env);
  if (databaseUrl !== undefined) {
    if (want === 'redis') throw usageError(`${command} is for Redis: pass --redis URL (or set ${URL_ENV.redis}).`);
    for (const flag of ['cluster', 'redis-client', 'prefix'] as const) {
      if (values[flag] !== undefined)
        throw usageError(`${command}: --${flag} is for Redis; with ${databaseFrom}, leave it out.`);
    }
    if (!/^postgres(ql)?:\/\//.test(databaseUrl)) {
      throw usageError(`${command}: ${databaseFrom} ${JSON.stringify(redact(databaseUrl))} is not a postgres:// URL.`);
    }
    const schema = str(values.schema);
    if (schema !== undefined && (schema.length === 0 || schema.includes('\0'))) {
      throw usageError(`${command}: --schema must be a schema name.`);
    }
    return { kind: 'postgresql', url: databaseUrl, schema };
  }
  if (want === 'postgresql') {
    throw usageError(`${command} is for PostgreSQL: pass --database-url URL (or set ${URL_ENV.postgresql}).`);
  }
  if (values.schema !== undefined) {
    throw usageError(`${command}: --schema is for PostgreSQL; for Redis, --prefix names the store's keys.`);
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

const isMissing = (error: unknown, name: string): boolean => {
  const code = (error as { code?: unknown } | null)?.code;
  return (
    (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') &&
    error instanceof Error &&
    error.message.includes(`'${name}`)
  );
};

/** A peer dependency, imported now; missing, a message that says what to install. */
async function peer<T>(name: string, load: () => Promise<T>, purpose: string, missing?: string): Promise<T> {
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

const message = (error: unknown): string => {
  if (error instanceof AggregateError && error.errors.length > 0) return message(error.errors[0]);
  return error instanceof Error ? error.message : String(error);
};

function unreachable(what: string, where: string, error: unknown): CliError {
  return new CliError(`cannot reach ${what} at ${where}: ${message(error) || 'connection failed'}`, EXIT.failure);
}

/** Connects to Redis (single node or Cluster) with ioredis or node-redis, and makes the store on it. */
export async function connectRedis(target: RedisTarget, restartFence = false): Promise<RedisConnection> {
  const { redisStore } = await import('../stores/redis/store.js');
  const where = target.urls.map(redact).join(',') + (target.cluster ? ' (cluster)' : '');
  const what = target.cluster ? 'the Redis Cluster' : 'Redis';
  let library = target.client;
  if (library === undefined) {
    // ioredis if the project has it, node-redis otherwise
    library = 'ioredis';
    try {
      await import('ioredis');
    } catch (error) {
      if (!isMissing(error, 'ioredis')) throw error;
      library = 'node-redis';
    }
  }
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

/** A schema name as the search_path setting reads it: quoted, with the spaces escaped for the startup options. */
const searchPathOption = (schema: string) =>
  `-c search_path=${`"${schema.replaceAll('"', '""')}"`.replace(/[\\ ]/g, '\\$&')}`;

/**
 * Connects to PostgreSQL through pg and drizzle-orm/node-postgres, and makes
 * the store on it. With `table`, checks that the idempotency_keys table is
 * on the search_path (every command but migrate).
 */
export async function connectPostgres(target: PostgresTarget, table: boolean): Promise<PostgresConnection> {
  const pgModule = await peer('pg', () => import('pg'), '--database-url');
  // pg is CommonJS: its exports are the default export of the ESM import
  const pg = (pgModule as unknown as { default?: typeof pgModule }).default ?? pgModule;
  const { drizzle } = await peer('drizzle-orm', () => import('drizzle-orm/node-postgres'), '--database-url');
  const { drizzleStore } = await import('../stores/drizzle/store.js');
  const where = redact(target.url) + (target.schema === undefined ? '' : `, schema ${target.schema}`);
  const pool = new pg.Pool({
    connectionString: target.url,
    max: 2,
    connectionTimeoutMillis: CONNECT_TIMEOUT,
    // an operator's command waits at most this long on a statement or a row lock, never forever
    statement_timeout: 30_000,
    lock_timeout: 10_000,
    ...(target.schema === undefined ? {} : { options: searchPathOption(target.schema) }),
  });
  pool.on('error', () => {});
  const query = async (text: string) => (await pool.query(text)).rows as Record<string, unknown>[];
  try {
    await query('select 1');
  } catch (error) {
    await pool.end().catch(() => {});
    throw unreachable('PostgreSQL', redact(target.url), error);
  }
  if (table) {
    let row: Record<string, unknown> | undefined;
    try {
      [row] = await query("select to_regclass('idempotency_keys') is not null as found, current_schema() as schema");
    } catch (error) {
      await pool.end().catch(() => {});
      throw error;
    }
    if (row?.found !== true) {
      await pool.end().catch(() => {});
      const at = target.schema ?? (row?.schema === null ? "the server's search_path (no schema)" : String(row?.schema));
      throw new CliError(
        `PostgreSQL at ${redact(target.url)} has no idempotency_keys table in ${at}: pass the application's --schema, or create it with ${'`trpc-idempotency migrate`'}.`,
        EXIT.failure,
      );
    }
  }
  const db = drizzle(pool);
  return {
    store: drizzleStore({ db }),
    db,
    query,
    where,
    close: async () => {
      await pool.end().catch(() => {});
    },
  };
}

/**
 * The live stores a test file runs on, one way for every file: each kind's
 * connections, schema or cluster are set up before the file's tests and torn
 * down after them (every store made closed, Redis keys deleted, schemas
 * dropped, pools ended). Call `liveStores` at the top level of the file.
 */
import { drizzle } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import { Cluster, Redis } from 'ioredis';
import type pg from 'pg';
import postgres from 'postgres';
import { createClient, createCluster } from 'redis';
import { afterAll, beforeAll, expect } from 'vitest';
import { drizzleStore } from '../../src/drizzle.js';
import { type IdempotencyStore, memoryStore } from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import { isolatedDatabase, type MysqlDatabase } from './mysql.js';
import { DATABASE_URL, isolatedSchema, type PgSchema, pgliteDb, poolAtIsolation } from './postgres.js';
import { connectRedis, deleteByPrefix, REDIS_URL, uniquePrefix } from './redis.js';
import { type PrivateCluster, type PrivateRedis, startPrivateCluster, startPrivateRedis } from './redis-server.js';
import { type SqliteFile, sqliteFile } from './sqlite.js';

export type StoreKind =
  | 'memory'
  | 'redis'
  /** ioredis's enableAutoPipelining: the commands of one tick sent together (docs/performance.md recommends it). */
  | 'redis, autopipelining'
  /** A 3-master Redis Cluster started for the file. */
  | 'redis cluster'
  | 'redis cluster, autopipelining'
  /** `restartFence` on, its markers written (`initialize()`) before the file's tests. */
  | 'redis, restart fence'
  | 'redis cluster, restart fence'
  /** `waitForReplicas: { replicas: 1 }` on a private primary with one replica, started for the file. */
  | 'redis, replicas acknowledged'
  /** `waitForReplicas: { replicas: 1 }` on a 3-master Cluster with a replica each, started for the file. */
  | 'redis cluster, replicas acknowledged'
  /** A node-redis client (`createClient`), connected before the file's tests. */
  | 'redis, node-redis'
  /** The same with `restartFence` on and `waitForReplicas` on the private primary with a replica. */
  | 'redis, node-redis, restart fence'
  | 'redis, node-redis, replicas acknowledged'
  /** A node-redis cluster (`createCluster`) on the 3-master Cluster. */
  | 'redis cluster, node-redis'
  | 'postgres'
  /** Sessions defaulting to a stricter isolation, as some teams configure their database. */
  | 'postgres, REPEATABLE READ'
  | 'postgres, SERIALIZABLE'
  /** postgres.js (`drizzle(postgres(url))`, as create-t3-app makes it) with its named prepared statements, and without (a transaction-mode pooler). */
  | 'postgres, postgres.js'
  | 'postgres, postgres.js, prepare: false'
  | 'PGlite'
  /** MariaDB (MYSQL_URL) through mysql2: a pool, and one connection serving every call. */
  | 'mariadb'
  | 'mariadb, single connection'
  /** A SQLite file of the test file's own (WAL, busy_timeout 5 s), through better-sqlite3 and through libSQL (file: URL). */
  | 'sqlite (better-sqlite3)'
  | 'sqlite (libsql)';

export interface LiveStore {
  /** The kind, as test names show it. */
  name: StoreKind;
  /** A new store of this kind; all of a kind share one backend (one Redis prefix, one schema). */
  make(): IdempotencyStore;
  /** Whether the store notifies waiters of a finished claim (Redis does; PostgreSQL and memory are polled). */
  notifies: boolean;
  /** For a kind on the shared Redis server (LiveStores.redis): the prefix its stores write under. */
  redisPrefix?: string;
}

export interface LiveStores {
  stores: LiveStore[];
  /** The plain Redis client and the prefix the Redis kinds write under (set up whatever the kinds). */
  redis: Redis;
  prefix: string;
  /** The PostgreSQL schema of the postgres kinds (after beforeAll; only when one was asked for). */
  postgres(): PgSchema;
  /** The MySQL/MariaDB database of the mariadb kinds (after beforeAll; only when one was asked for). */
  mysql(): MysqlDatabase;
  /** The SQLite file of the sqlite kinds (after beforeAll; only when one was asked for). */
  sqlite(): SqliteFile;
  /** A new store of `kind`, one of those asked for. */
  store(kind: StoreKind): IdempotencyStore;
  /** The client of the redis cluster kind (after beforeAll; only when a cluster kind was asked for). */
  cluster(): Cluster;
}

/** The stores of `kinds`, for `describe.each(stores)('on $name', ({ make }) => ...)`. */
export function liveStores(label: string, kinds: readonly StoreKind[]): LiveStores {
  const redis = connectRedis();
  const prefix = uniquePrefix(label);
  const made: IdempotencyStore[] = [];
  const track = <S extends IdempotencyStore>(store: S): S => {
    made.push(store);
    return store;
  };
  const wants = (...some: StoreKind[]) => kinds.some((k) => some.includes(k));

  let schema: PgSchema | undefined;
  let mysqlDb: MysqlDatabase | undefined;
  let mysqlSingle: Awaited<ReturnType<MysqlDatabase['single']>> | undefined;
  let sqlite: SqliteFile | undefined;
  let sqliteBetter: ReturnType<SqliteFile['better']> | undefined;
  let sqliteLibsql: ReturnType<SqliteFile['libsql']> | undefined;
  let lite: Awaited<ReturnType<typeof pgliteDb>> | undefined;
  let cluster: PrivateCluster | undefined;
  let replicatedCluster: PrivateCluster | undefined;
  const nodeRedisClients: { close(): Promise<unknown> }[] = [];
  let nodeRedis: ReturnType<typeof createClient> | undefined;
  let nodeRedisReplicated: ReturnType<typeof createClient> | undefined;
  let nodeRedisCluster: ReturnType<typeof createCluster> | undefined;
  let replicated: { primary: PrivateRedis; replica: PrivateRedis; client: Redis } | undefined;
  const clients: (Redis | Cluster)[] = [];
  const pools = new Map<string, pg.Pool>();
  const dbs = new Map<string, ReturnType<typeof drizzle>>();
  const postgresJs = new Map<boolean, { sql: postgres.Sql; db: ReturnType<typeof drizzlePostgresJs> }>();

  beforeAll(async () => {
    const pgKinds = [
      'postgres',
      'postgres, REPEATABLE READ',
      'postgres, SERIALIZABLE',
      'postgres, postgres.js',
      'postgres, postgres.js, prepare: false',
    ] as const;
    [schema, lite, cluster, replicatedCluster, mysqlDb, sqlite] = await Promise.all([
      wants(...pgKinds) ? isolatedSchema(label.replaceAll('-', '_')) : undefined,
      wants('PGlite') ? pgliteDb() : undefined,
      wants(
        'redis cluster',
        'redis cluster, autopipelining',
        'redis cluster, restart fence',
        'redis cluster, node-redis',
      )
        ? startPrivateCluster(3)
        : undefined,
      wants('redis cluster, replicas acknowledged') ? startPrivateCluster(3, 1) : undefined,
      wants('mariadb', 'mariadb, single connection') ? isolatedDatabase(label) : undefined,
      wants('sqlite (better-sqlite3)', 'sqlite (libsql)') ? sqliteFile(label) : undefined,
    ]);
    if (wants('sqlite (better-sqlite3)')) sqliteBetter = sqlite!.better();
    if (wants('sqlite (libsql)')) sqliteLibsql = sqlite!.libsql();
    if (wants('mariadb, single connection')) mysqlSingle = await mysqlDb!.single();
    if (wants('redis, restart fence')) await fenced().initialize();
    if (wants('redis cluster, restart fence')) await clusterFenced().initialize();
    if (wants('redis, replicas acknowledged', 'redis, node-redis, replicas acknowledged'))
      replicated = await startReplicated();
    if (wants('redis, node-redis', 'redis, node-redis, restart fence')) {
      nodeRedis = await connected(createClient({ url: REDIS_URL }));
      if (wants('redis, node-redis, restart fence')) await nodeRedisFenced().initialize();
    }
    if (wants('redis, node-redis, replicas acknowledged'))
      nodeRedisReplicated = await connected(createClient({ url: `redis://127.0.0.1:${replicated!.primary.port}` }));
    if (wants('redis cluster, node-redis'))
      nodeRedisCluster = await connected(
        createCluster({ rootNodes: cluster!.ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })) }),
      );
    for (const level of ['repeatable read', 'serializable'] as const) {
      if (!wants(`postgres, ${level.toUpperCase()}` as StoreKind) || schema === undefined) continue;
      const pool = poolAtIsolation(schema, level);
      pools.set(level, pool);
      dbs.set(level, drizzle(pool));
      const { rows } = await pool.query<{ transaction_isolation: string }>('show transaction_isolation');
      expect(rows[0]?.transaction_isolation).toBe(level);
    }
    for (const prepare of [true, false]) {
      if (!wants(prepare ? 'postgres, postgres.js' : 'postgres, postgres.js, prepare: false')) continue;
      const sql = postgres(DATABASE_URL, {
        prepare,
        max: 10,
        connection: { search_path: schema!.schema },
        onnotice: () => {},
      });
      postgresJs.set(prepare, { sql, db: drizzlePostgresJs(sql) });
    }
  }, 60_000);
  afterAll(async () => {
    await Promise.all(made.map(async (s) => (s as { close?: () => unknown }).close?.()));
    await Promise.all([...pools.values()].map((p) => p.end()));
    await Promise.all([...postgresJs.values()].map(({ sql }) => sql.end({ timeout: 5 })));
    for (const c of clients) c.disconnect();
    await deleteByPrefix(redis, prefix);
    redis.disconnect();
    replicated?.client.disconnect();
    await Promise.all(nodeRedisClients.map((c) => c.close().catch(() => {})));
    await Promise.all([
      schema?.drop(),
      mysqlDb?.drop(),
      sqlite?.drop(),
      lite?.close(),
      cluster?.stop(),
      replicatedCluster?.stop(),
      replicated?.primary.stop(),
      replicated?.replica.stop(),
    ]);
  });

  const client = (options: { cluster: boolean; pipelined: boolean }): Redis | Cluster => {
    const c = options.cluster
      ? new Cluster(
          cluster!.ports.map((port) => ({ host: '127.0.0.1', port })),
          { enableAutoPipelining: options.pipelined },
        )
      : new Redis(REDIS_URL, { enableAutoPipelining: options.pipelined });
    clients.push(c);
    return c;
  };
  let pipelined: Redis | Cluster | undefined;
  let clustered: Cluster | undefined;
  let clusteredPipelined: Redis | Cluster | undefined;
  const clusterClient = () => (clustered ??= client({ cluster: true, pipelined: false }) as Cluster);
  const fenced = () =>
    redisStore({ client: redis, prefix: sharedRedisPrefix('redis, restart fence', prefix)!, restartFence: true });
  const nodeRedisFenced = () =>
    redisStore({
      client: nodeRedis!,
      prefix: sharedRedisPrefix('redis, node-redis, restart fence', prefix)!,
      restartFence: true,
    });
  /** A node-redis client or cluster, connected, closed after the file's tests. */
  async function connected<
    C extends { connect(): Promise<unknown>; close(): Promise<unknown>; on(...args: never[]): unknown },
  >(c: C): Promise<C> {
    (c.on as (event: string, listener: () => void) => unknown)('error', () => {});
    await c.connect();
    nodeRedisClients.push(c);
    return c;
  }
  const clusterFenced = () => redisStore({ client: clusterClient(), prefix: 'cf:', restartFence: true });

  const make = (kind: StoreKind): IdempotencyStore => {
    switch (kind) {
      case 'memory':
        return track(memoryStore());
      case 'redis':
        return track(redisStore({ client: redis, prefix }));
      case 'redis, autopipelining':
        return track(redisStore({ client: (pipelined ??= client({ cluster: false, pipelined: true })), prefix }));
      case 'redis cluster':
        return track(redisStore({ client: clusterClient(), prefix: 'c:' }));
      case 'redis cluster, autopipelining':
        return track(
          redisStore({ client: (clusteredPipelined ??= client({ cluster: true, pipelined: true })), prefix: 'cp:' }),
        );
      case 'redis, restart fence':
        return track(fenced());
      case 'redis cluster, restart fence':
        return track(clusterFenced());
      case 'redis, replicas acknowledged':
        return track(
          redisStore({ client: replicated!.client, prefix, waitForReplicas: { replicas: 1, timeout: 3_000 } }),
        );
      case 'redis cluster, replicas acknowledged': {
        const c = new Cluster(replicatedCluster!.ports.map((port) => ({ host: '127.0.0.1', port })));
        clients.push(c);
        return track(redisStore({ client: c, prefix: 'ca:', waitForReplicas: { replicas: 1, timeout: 3_000 } }));
      }
      case 'redis, node-redis':
        return track(redisStore({ client: nodeRedis!, prefix: sharedRedisPrefix('redis, node-redis', prefix)! }));
      case 'redis, node-redis, restart fence':
        return track(nodeRedisFenced());
      case 'redis, node-redis, replicas acknowledged':
        return track(
          redisStore({ client: nodeRedisReplicated!, prefix, waitForReplicas: { replicas: 1, timeout: 3_000 } }),
        );
      case 'redis cluster, node-redis':
        return track(redisStore({ client: nodeRedisCluster!, prefix: 'cn:' }));
      case 'postgres':
        return drizzleStore({ db: schema!.db });
      case 'postgres, REPEATABLE READ':
        return drizzleStore({ db: dbs.get('repeatable read')! });
      case 'postgres, SERIALIZABLE':
        return drizzleStore({ db: dbs.get('serializable')! });
      case 'postgres, postgres.js':
        return drizzleStore({ db: postgresJs.get(true)!.db });
      case 'postgres, postgres.js, prepare: false':
        return drizzleStore({ db: postgresJs.get(false)!.db });
      case 'PGlite':
        return drizzleStore({ db: lite!.db });
      case 'mariadb':
        return drizzleStore({ db: mysqlDb!.db });
      case 'mariadb, single connection':
        return drizzleStore({ db: mysqlSingle! });
      case 'sqlite (better-sqlite3)':
        return drizzleStore({ db: sqliteBetter! });
      case 'sqlite (libsql)':
        return drizzleStore({ db: sqliteLibsql! });
    }
  };
  return {
    stores: kinds.map((name) => {
      const redisPrefix = sharedRedisPrefix(name, prefix);
      return {
        name,
        make: () => make(name),
        notifies: name.startsWith('redis'),
        ...(redisPrefix === undefined ? {} : { redisPrefix }),
      };
    }),
    redis,
    prefix,
    store: (kind) => {
      if (!kinds.includes(kind)) throw new Error(`${kind} was not asked for`);
      return make(kind);
    },
    postgres: () => {
      if (schema === undefined) throw new Error('no postgres kind was asked for, or beforeAll has not run');
      return schema;
    },
    mysql: () => {
      if (mysqlDb === undefined) throw new Error('no mariadb kind was asked for, or beforeAll has not run');
      return mysqlDb;
    },
    sqlite: () => {
      if (sqlite === undefined) throw new Error('no sqlite kind was asked for, or beforeAll has not run');
      return sqlite;
    },
    cluster: () => {
      if (cluster === undefined) throw new Error('no redis cluster kind was asked for, or beforeAll has not run');
      return clusterClient();
    },
  };
}

/** The prefix the stores of `kind` write under on the shared Redis server (`prefix`: the file's), if they do. */
function sharedRedisPrefix(kind: StoreKind, prefix: string): string | undefined {
  switch (kind) {
    case 'redis':
    case 'redis, autopipelining':
      return prefix;
    case 'redis, restart fence':
      return `${prefix}f:`;
    case 'redis, node-redis':
      return `${prefix}n:`;
    case 'redis, node-redis, restart fence':
      return `${prefix}nf:`;
    default:
      return undefined;
  }
}

/** A private primary and one replica of it (in sync before this returns), and a client of the primary. */
async function startReplicated(): Promise<{ primary: PrivateRedis; replica: PrivateRedis; client: Redis }> {
  const primary = await startPrivateRedis();
  const replica = await startPrivateRedis(['--replicaof', '127.0.0.1', String(primary.port)]);
  const client = new Redis({ port: primary.port, host: '127.0.0.1' });
  try {
    for (let tries = 0; !/connected_slaves:1\b/.test(await client.info('replication')); tries++) {
      if (tries === 200) throw new Error('the private replica did not connect to its primary within 10 s');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } catch (error) {
    // afterAll cannot stop what it was never given
    client.disconnect();
    await Promise.all([primary.stop(), replica.stop()]);
    throw error;
  }
  return { primary, replica, client };
}

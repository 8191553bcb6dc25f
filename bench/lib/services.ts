/**
 * The services a bench run owns: redis-servers on ports of its own (so
 * INFO commandstats counts nothing but the bench), PostgreSQL schemas and
 * MariaDB databases of its own on the local servers, and SQLite files, each
 * migrated with the package's migrations.
 */
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { isolatedDatabase, MYSQL_URL } from '../../test/helpers/mysql.js';
import { type PrivateRedis, startPrivateRedis } from '../../test/helpers/redis-server.js';
import { sqliteFile } from '../../test/helpers/sqlite.js';

export const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const MIGRATIONS = fileURLToPath(new URL('../../drizzle', import.meta.url));
const MIGRATIONS_TABLE = '__trpc_idempotency_migrations';

// The same private redis-server and command counts as the tests use.
export { commandCalls, delta, freePort } from '../../test/helpers/redis-server.js';

export interface BenchRedis {
  port: number;
  url: string;
  pid: number;
  stop(): Promise<void>;
}

/** A redis-server of the bench's own: no persistence, loopback only. */
export async function startRedis(): Promise<BenchRedis> {
  let redis: PrivateRedis;
  try {
    redis = await startPrivateRedis();
  } catch (error) {
    throw new Error('redis-server did not start (is redis-server installed?)', { cause: error });
  }
  return { port: redis.port, url: `redis://127.0.0.1:${redis.port}`, pid: redis.process.pid!, stop: redis.stop };
}

export interface BenchSchema {
  schema: string;
  /** A connection string whose sessions use this schema. */
  url: string;
  drop(): Promise<void>;
}

/** A schema of the bench's own, with the package's migrations applied. */
export async function createSchema(label: string): Promise<BenchSchema> {
  const schema = `idem_bench_${label}_${randomUUID().slice(0, 8)}`;
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  await admin.query(`create schema "${schema}"`);
  await admin.end();
  const u = new URL(DATABASE_URL);
  u.searchParams.set('options', `-c search_path=${schema}`);
  const url = u.toString();
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  await migrate(drizzle(pool), {
    migrationsFolder: MIGRATIONS,
    migrationsSchema: schema,
    migrationsTable: MIGRATIONS_TABLE,
  });
  await pool.end();
  return {
    schema,
    url,
    async drop() {
      const cleanup = new pg.Client({ connectionString: DATABASE_URL });
      await cleanup.connect();
      await cleanup.query(`drop schema if exists "${schema}" cascade`);
      await cleanup.end();
    },
  };
}

export { MYSQL_URL };

export interface BenchDatabase {
  /** The database's name (MariaDB) or file (SQLite). */
  name: string;
  /** A URL whose connections use it (MariaDB), or the file's path (SQLite). */
  url: string;
  drop(): Promise<void>;
}

/** A MariaDB database of the bench's own on MYSQL_URL's server, with the package's migrations applied. */
export async function createMysqlDatabase(label: string): Promise<BenchDatabase> {
  const database = await isolatedDatabase(`bench_${label}`, 1);
  await database.pool.end();
  return {
    name: database.database,
    url: database.url,
    async drop() {
      const admin = await mysql.createConnection(MYSQL_URL);
      await admin.query(`drop database if exists \`${database.database}\``);
      await admin.end();
    },
  };
}

/** A SQLite file of the bench's own, in WAL mode (it stays set in the file), with the package's migrations applied. */
export async function createSqliteFile(label: string): Promise<BenchDatabase> {
  const file = await sqliteFile(`bench-${label}`);
  return {
    name: file.path,
    url: file.path,
    async drop() {
      file.drop();
    },
  };
}

/**
 * CPU time of a process so far, in microseconds (Linux): the sum over its threads of the scheduler's
 * own count (`/proc/<pid>/task/<tid>/schedstat`, in nanoseconds). /proc/<pid>/stat counts in 10 ms ticks,
 * which over a 2 s run at a few hundred requests per second is a step of 30 µs per request; where
 * schedstat is missing (a kernel without it), that is what this falls back to.
 */
export function cpuMicros(pid: number): number {
  try {
    const ns = schedstat(pid, 0);
    if (Number.isFinite(ns) && ns > 0) return ns / 1_000;
  } catch {
    // A thread that ended between the listing and the read, or no schedstat: use the ticks.
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // Fields 14 and 15 of the full line (utime, stime), in clock ticks (100 Hz on Linux).
    return (Number(fields[11]) + Number(fields[12])) * 10_000;
  } catch {
    return Number.NaN;
  }
}

/**
 * How many times the threads of a process have been put on a CPU so far (the third field of
 * `/proc/<pid>/task/<tid>/schedstat`): a process woken up once per request runs about once per request,
 * one that finds several requests' work at each wake-up less often. NaN without schedstat.
 */
export function timeslices(pid: number): number {
  try {
    return schedstat(pid, 2);
  } catch {
    return Number.NaN;
  }
}

/**
 * One field of `/proc/<pid>/task/<tid>/schedstat` summed over the process's threads: 0, time on a CPU
 * (ns); 2, times put on a CPU. Throws where the file is missing or a thread ended meanwhile.
 */
function schedstat(pid: number, field: 0 | 2): number {
  let sum = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    sum += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[field]);
  }
  return sum;
}

/** The CPU time so far of every PostgreSQL server process on this machine, by process id, in microseconds. */
function postgresProcesses(): Map<number, number> {
  const cpu = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === 'postgres')
        cpu.set(Number(entry), cpuMicros(Number(entry)));
    } catch {
      // The process ended meanwhile.
    }
  }
  return cpu;
}

/**
 * Starts counting the CPU time of every PostgreSQL server process on this machine (shared with whatever
 * else uses the server); the function returned gives the microseconds spent since. A process that ended
 * meanwhile (a backend whose connection closed, an autovacuum worker) takes its time with it: the count
 * leaves it out rather than going negative; one that started meanwhile counts from its start.
 */
export function postgresCpuCounter(): () => number {
  const before = postgresProcesses();
  return () => {
    let total = 0;
    for (const [pid, us] of postgresProcesses()) total += Math.max(0, us - (before.get(pid) ?? 0));
    return total;
  };
}

/**
 * CPU time so far (µs) of each MariaDB connection thread whose session uses `database`: with MariaDB's
 * one thread per connection (its default on Linux), `information_schema.PROCESSLIST.TID` is that thread of the
 * one mariadbd process. The server's background threads (InnoDB's purge, page cleaner, log writer) are left out,
 * as PostgreSQL's WAL writer and checkpointer are. Empty where the server is not on this machine.
 */
export async function mariadbConnectionCpu(database: string): Promise<Map<number, number>> {
  const pid = processByName(['mariadbd', 'mysqld']);
  const out = new Map<number, number>();
  if (pid === undefined) return out;
  const admin = await mysql.createConnection(MYSQL_URL);
  try {
    const [rows] = await admin.query<mysql.RowDataPacket[]>(
      'select TID from information_schema.PROCESSLIST where DB = ?',
      [database],
    );
    for (const { TID } of rows) {
      try {
        const ns = Number(readFileSync(`/proc/${pid}/task/${TID}/schedstat`, 'utf8').split(' ')[0]);
        out.set(Number(TID), ns / 1_000);
      } catch {
        // The connection closed meanwhile.
      }
    }
  } finally {
    await admin.end();
  }
  return out;
}

/** The CPU (µs) of the connection threads in `after` since `before`: one opened meanwhile counts from its start. */
export function mariadbCpuSince(before: Map<number, number>, after: Map<number, number>): number {
  let total = 0;
  for (const [tid, us] of after) total += Math.max(0, us - (before.get(tid) ?? 0));
  return total;
}

/** The first process on this machine whose command is one of `names`. */
function processByName(names: string[]): number | undefined {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (names.includes(readFileSync(`/proc/${entry}/comm`, 'utf8').trim())) return Number(entry);
    } catch {
      // The process ended meanwhile.
    }
  }
  return undefined;
}

export function loadAverage(): [number, number, number] {
  try {
    const [a, b, c] = readFileSync('/proc/loadavg', 'utf8').split(' ').map(Number);
    return [a!, b!, c!];
  } catch {
    return [Number.NaN, Number.NaN, Number.NaN];
  }
}

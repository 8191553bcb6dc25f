/**
 * The services a bench run owns: redis-servers on ports of its own (so
 * INFO commandstats counts nothing but the bench) and PostgreSQL schemas of
 * its own on the local server, migrated with the package's migrations.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import { Redis } from 'ioredis';
import pg from 'pg';

export const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const MIGRATIONS = fileURLToPath(new URL('../../drizzle', import.meta.url));
const MIGRATIONS_TABLE = '__trpc_idempotency_migrations';

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export interface BenchRedis {
  port: number;
  url: string;
  pid: number;
  stop(): Promise<void>;
}

/** A redis-server of the bench's own: no persistence, loopback only. */
export async function startRedis(): Promise<BenchRedis> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'idem-bench-redis-'));
  const child: ChildProcess = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir],
    { stdio: 'ignore' },
  );
  for (let i = 0; ; i++) {
    const probe = new Redis({ port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    probe.on('error', () => {});
    try {
      await probe.connect();
      await probe.ping();
      probe.disconnect();
      break;
    } catch (error) {
      probe.disconnect();
      if (i > 100) throw new Error(`redis-server did not start on port ${port} (is redis-server installed?)`, { cause: error });
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    pid: child.pid!,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => {
          rmSync(dir, { recursive: true, force: true });
          resolve();
        });
        child.kill('SIGKILL');
      }),
  };
}

/** `INFO commandstats` as { command: calls }. */
export async function commandCalls(redis: Redis): Promise<Record<string, number>> {
  const info = await redis.info('commandstats');
  const calls: Record<string, number> = {};
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls[match[1]!] = Number(match[2]);
  return calls;
}

export function delta(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [cmd, n] of Object.entries(after)) {
    const d = n - (before[cmd] ?? 0);
    if (d > 0) out[cmd] = d;
  }
  return out;
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
  await migrate(drizzle(pool), { migrationsFolder: MIGRATIONS, migrationsSchema: schema, migrationsTable: MIGRATIONS_TABLE });
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

/** User + system CPU time of a process so far, in microseconds (Linux). */
export function cpuMicros(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // Fields 14 and 15 of the full line (utime, stime), in clock ticks (100 Hz on Linux).
    return (Number(fields[11]) + Number(fields[12])) * 10_000;
  } catch {
    return Number.NaN;
  }
}

/** CPU time of every PostgreSQL server process on this machine (shared with whatever else uses it), in microseconds. */
export function postgresCpuMicros(): number {
  let total = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === 'postgres') total += cpuMicros(Number(entry));
    } catch {
      // The process ended meanwhile.
    }
  }
  return total;
}

export function loadAverage(): [number, number, number] {
  try {
    const [a, b, c] = readFileSync('/proc/loadavg', 'utf8').split(' ').map(Number);
    return [a!, b!, c!];
  } catch {
    return [Number.NaN, Number.NaN, Number.NaN];
  }
}

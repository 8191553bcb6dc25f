import { execFile } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { migrateIdempotencyKeys } from '../../src/drizzle.js';
import { logTail, releasePort, reservePort, withStartAttempts } from './ports.js';
import { MIGRATIONS, MIGRATIONS_TABLE } from './postgres.js';

const run = promisify(execFile);
const BIN = process.env.PG_BIN ?? '/usr/lib/postgresql/15/bin';

export interface PrivatePostgres {
  port: number;
  /** `postgres://postgres@127.0.0.1:<port>/postgres` */
  url: string;
  /** Stops the server: `fast` ends sessions cleanly, `immediate` is a crash (recovery from WAL at the next start). */
  stop(mode?: 'fast' | 'immediate'): Promise<void>;
  start(): Promise<void>;
  /** Stops it for good and deletes its data directory. */
  destroy(): Promise<void>;
}

/** Runs a PostgreSQL binary as the `postgres` user: PostgreSQL refuses to run as root, and CI runs as root. */
async function asPostgres(binary: string, args: string[]): Promise<void> {
  const asRoot = process.getuid?.() === 0;
  const [command, argv] = asRoot
    ? ['runuser', ['-u', 'postgres', '--', join(BIN, binary), ...args]]
    : [join(BIN, binary), args];
  await run(command, argv, { timeout: 60_000 });
}

/**
 * A PostgreSQL server of the test's own (never the shared one), in a
 * temporary data directory owned by `postgres`, on a free port, with its
 * socket in that directory. The package's migrations are applied to its
 * `postgres` database. `fsync=off`: a killed server process keeps what it
 * wrote in the OS page cache, which is all these tests need.
 */
export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const dir = mkdtempSync(join(tmpdir(), 'idem-pg-'));
  const data = join(dir, 'data');
  if (process.getuid?.() === 0) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    chownSync(dir, Number(stdout.trim()), Number(gid.trim()));
  }
  let port = 0;
  const start = () =>
    asPostgres('pg_ctl', [
      '-D',
      data,
      '-l',
      join(dir, 'log'),
      '-w',
      '-t',
      '60',
      '-o',
      `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50`,
      'start',
    ]).catch((error: unknown) => {
      const tail = logTail(join(dir, 'log'));
      throw new Error(
        `${error instanceof Error ? error.message : String(error)}${tail ? `\nits log ends:\n${tail}` : ''}`,
      );
    });
  const stop = (mode: 'fast' | 'immediate' = 'fast') =>
    asPostgres('pg_ctl', ['-D', data, '-m', mode, '-w', '-t', '60', 'stop']);
  let running = false;
  try {
    await asPostgres('initdb', ['-D', data, '-U', 'postgres', '-A', 'trust', '--no-sync', '--no-instructions']);
    // on a reserved port (test/helpers/ports.ts); a start that fails (the port taken meanwhile) is tried on another
    await withStartAttempts('a PostgreSQL server', 3, async () => {
      port = await reservePort();
      try {
        await start();
      } catch (error) {
        await stop('immediate').catch(() => {}); // a server that started too late for pg_ctl's wait
        releasePort(port);
        throw error;
      }
    });
    running = true;
    const pool = new pg.Pool({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`, max: 1 });
    await migrateIdempotencyKeys(drizzle(pool), { migrationsFolder: MIGRATIONS, migrationsTable: MIGRATIONS_TABLE });
    await pool.end();
  } catch (error) {
    if (running) await stop('immediate').catch(() => {});
    rmSync(dir, { recursive: true, force: true });
    releasePort(port);
    throw error;
  }
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  return {
    port,
    url,
    async stop(mode) {
      await stop(mode);
      running = false;
    },
    async start() {
      await start();
      running = true;
    },
    async destroy() {
      if (running) await stop('immediate').catch(() => {});
      running = false;
      rmSync(dir, { recursive: true, force: true });
      releasePort(port);
    },
  };
}

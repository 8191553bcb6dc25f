import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { drizzle } from 'drizzle-orm/mysql2';
import mysql from 'mysql2/promise';
import { migrateIdempotencyKeys } from '../../src/drizzle.js';
import { MYSQL_MIGRATIONS } from './mysql.js';
import { logTail, releasePort, reservePort, withStartAttempts } from './ports.js';

const run = promisify(execFile);
const MARIADBD = process.env.MARIADBD ?? '/usr/sbin/mariadbd';

export interface PrivateMariadb {
  port: number;
  /** `mysql://root@127.0.0.1:<port>/app` */
  url: string;
  /** Stops the server: `clean` (SIGTERM: a shutdown that ends sessions), `crash` (SIGKILL: InnoDB recovers at the next start). */
  stop(mode?: 'clean' | 'crash'): Promise<void>;
  start(): Promise<void>;
  /** Stops it for good and deletes its data directory. */
  destroy(): Promise<void>;
}

/**
 * A MariaDB server of the test's own (never the shared one), in a temporary
 * data directory (owned by `mysql` when run as root), on a reserved port,
 * with the package's migrations applied to its `app` database.
 * `innodb_flush_log_at_trx_commit=2`: a killed server process keeps what it
 * wrote in the OS page cache, which is all these tests need.
 */
export async function startPrivateMariadb(): Promise<PrivateMariadb> {
  const dir = mkdtempSync(join(tmpdir(), 'idem-mariadb-'));
  const data = join(dir, 'data');
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const [{ stdout: uid }, { stdout: gid }] = await Promise.all([
      run('id', ['-u', 'mysql']),
      run('id', ['-g', 'mysql']),
    ]);
    chownSync(dir, Number(uid.trim()), Number(gid.trim()));
  }
  const user = asRoot ? ['--user=mysql'] : [];
  let port = 0;
  let child: ChildProcess | undefined;
  const ping = async () => {
    const c = await mysql.createConnection({ host: '127.0.0.1', port, user: 'root', connectTimeout: 1_000 });
    await c.end();
  };
  const start = async () => {
    const log = join(dir, 'error.log');
    child = spawn(
      MARIADBD,
      [
        '--no-defaults',
        `--datadir=${data}`,
        ...user,
        `--port=${port}`,
        '--bind-address=127.0.0.1',
        `--socket=${join(dir, 'sock')}`,
        `--pid-file=${join(dir, 'pid')}`,
        `--log-error=${log}`,
        '--skip-log-bin',
        '--innodb-buffer-pool-size=32M',
        '--innodb-flush-log-at-trx-commit=2',
        '--max-connections=60',
      ],
      { stdio: 'ignore' },
    );
    const exited = new Promise<never>((_, reject) =>
      child!.once('exit', (code) => reject(new Error(`mariadbd exited (${code}); its log ends:\n${logTail(log)}`))),
    );
    exited.catch(() => {});
    for (let tries = 0; ; tries++) {
      try {
        await Promise.race([ping(), exited]);
        return;
      } catch (error) {
        if (child.exitCode !== null || tries === 300) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  };
  const stop = async (mode: 'clean' | 'crash' = 'clean') => {
    const c = child;
    if (c === undefined || c.exitCode !== null) return;
    const gone = new Promise((resolve) => c.once('exit', resolve));
    c.kill(mode === 'clean' ? 'SIGTERM' : 'SIGKILL');
    await gone;
  };
  let running = false;
  try {
    await run('mariadb-install-db', [
      '--no-defaults',
      `--datadir=${data}`,
      ...user,
      '--auth-root-authentication-method=normal',
      '--skip-test-db',
    ]);
    await withStartAttempts('a MariaDB server', 3, async () => {
      port = await reservePort();
      try {
        await start();
      } catch (error) {
        await stop('crash');
        releasePort(port);
        throw error;
      }
    });
    running = true;
    const admin = await mysql.createConnection({ host: '127.0.0.1', port, user: 'root' });
    await admin.query('create database app');
    await admin.end();
    const pool = mysql.createPool({ uri: `mysql://root@127.0.0.1:${port}/app`, connectionLimit: 1 });
    await migrateIdempotencyKeys(drizzle(pool), { migrationsFolder: MYSQL_MIGRATIONS });
    await pool.end();
  } catch (error) {
    if (running) await stop('crash');
    rmSync(dir, { recursive: true, force: true });
    releasePort(port);
    throw error;
  }
  return {
    port,
    url: `mysql://root@127.0.0.1:${port}/app`,
    async stop(mode) {
      await stop(mode);
      running = false;
    },
    async start() {
      await start();
      running = true;
    },
    async destroy() {
      if (running) await stop('crash');
      running = false;
      rmSync(dir, { recursive: true, force: true });
      releasePort(port);
    },
  };
}

import { execFile } from 'node:child_process';
import { appendFileSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { migrateIdempotencyKeys } from '../../src/drizzle.js';
import { logTail, releasePort, reservePort, withStartAttempts } from './ports.js';
import { MIGRATIONS, MIGRATIONS_TABLE } from './postgres.js';
import { startPipe } from './proxy.js';

const run = promisify(execFile);
const BIN = process.env.PG_BIN ?? '/usr/lib/postgresql/15/bin';
/** The standby's `application_name`, which `synchronous_standby_names` names. */
export const STANDBY_NAME = 'idem_standby';

export interface ReplicatedPostgresOptions {
  /**
   * `synchronous_commit` on the primary, with the standby named in `synchronous_standby_names`
   * (`on`: a commit is acknowledged once the standby has flushed its WAL to disk; `remote_apply`:
   * once it has also replayed it). `false`: an asynchronous standby (`synchronous_standby_names`
   * empty, `synchronous_commit` at its default, `on`, which then only waits for the local flush).
   */
  synchronous: 'on' | 'remote_apply' | false;
}

export interface ReplicatedPostgres {
  primary: { port: number; url: string };
  standby: { port: number; url: string };
  /**
   * The address applications connect to: a TCP proxy that sends each new connection to the
   * primary, and to the standby once `serviceToStandby()` was called, as the address a failover
   * manager moves (a virtual IP, a HAProxy of Patroni, a cloud endpoint). Its connections to a
   * killed primary die with it.
   */
  service: { port: number; url: string };
  /** New connections to `service` go to the standby from now on. */
  serviceToStandby(): void;
  /** What the primary says of its standby (`pg_stat_replication`): `sync` or `async`. */
  syncState(): Promise<string | undefined>;
  /**
   * From now on, the WAL the primary streams to the standby is held in the proxy between them and
   * never delivered (as a slow or cut network would): the standby falls behind. With a synchronous
   * standby, every commit then waits; with an asynchronous one, commits go on.
   */
  holdStream(): void;
  /** SIGKILL of the primary's postmaster and of every process it started at once, as a machine that dies. */
  killPrimary(): Promise<void>;
  /** Promotes the standby (`pg_ctl promote -w`): it accepts writes when this resolves. */
  promote(): Promise<void>;
  /** Stops every server and the proxy, deletes the data directories; safe to call at any point, twice. */
  stop(): Promise<void>;
}

/** Runs a PostgreSQL binary as the `postgres` user (PostgreSQL refuses to run as root). */
async function asPostgres(binary: string, args: string[]): Promise<string> {
  const asRoot = process.getuid?.() === 0;
  const [command, argv] = asRoot
    ? ['runuser', ['-u', 'postgres', '--', join(BIN, binary), ...args]]
    : [join(BIN, binary), args];
  const { stdout } = await run(command, argv, { timeout: 60_000 });
  return stdout;
}

/** The postmaster's pid, from the first line of `postmaster.pid`, if the file is there. */
function postmasterPid(data: string): number | undefined {
  const file = join(data, 'postmaster.pid');
  if (!existsSync(file)) return undefined;
  const pid = Number(readFileSync(file, 'utf8').split('\n')[0]);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

/** The pids of a process's children, from the parent pid in each /proc/<pid>/stat (Linux). */
function childrenOf(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ')'
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) children.push(Number(entry));
    } catch {} // gone meanwhile
  }
  return children;
}

/** Whether a process runs: it exists and is not a zombie (dead, not yet reaped by whoever adopted it). */
const alive = (pid: number) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
};

async function waitGone(pids: number[], withinMs: number): Promise<void> {
  const until = Date.now() + withinMs;
  while (pids.some(alive)) {
    if (Date.now() > until) throw new Error(`postgres processes still alive: ${pids.filter(alive).join(' ')}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const signal = (pid: number, name: NodeJS.Signals) => {
  try {
    process.kill(pid, name);
  } catch {} // already gone
};

/**
 * SIGKILL of a postmaster and its children, none of which can act in between: each is stopped
 * (SIGSTOP) first, the postmaster before its children are listed so that it forks no other. A child
 * killed after the postmaster would otherwise notice its death and answer its client first.
 * Resolves once they are gone.
 */
async function killTree(pid: number): Promise<void> {
  if (!alive(pid)) return;
  signal(pid, 'SIGSTOP');
  const children = childrenOf(pid);
  for (const child of children) signal(child, 'SIGSTOP');
  for (const p of [pid, ...children]) signal(p, 'SIGKILL');
  await waitGone([pid, ...children], 10_000);
}

/**
 * A PostgreSQL primary and a streaming standby of the test's own, in a temporary directory owned
 * by `postgres`, on free ports, with `fsync` on (the default) and `wal_level = replica`. The
 * package's migrations are applied to the primary's `postgres` database before the standby is made
 * (`pg_basebackup -X stream -R`). The standby streams from the primary through a TCP proxy of this
 * process, so that a test can hold the stream back (`holdStream`). With `synchronous`, the primary
 * names the standby in `synchronous_standby_names` (set after the base backup, so the standby does
 * not inherit it: once promoted, it has no synchronous standby to wait for) and this resolves only
 * once the primary reports it `sync`. initdb and pg_basebackup skip their own final sync of the
 * files they wrote (`--no-sync`): the tests kill processes, not the machine, and the servers flush
 * every commit. Startup took 2 to 8 s on 2 busy cores; stop() 1.5 to 3 s. Both servers are on
 * reserved ports (test/helpers/ports.ts); a start that fails (a port taken meanwhile, a standby
 * slow to stream) is stopped and tried again in a new directory on new ports, up to 3 times.
 */
export async function startReplicatedPostgres(options: ReplicatedPostgresOptions): Promise<ReplicatedPostgres> {
  return withStartAttempts('a replicated PostgreSQL (primary and standby)', 3, () =>
    startReplicatedPostgresOnce(options),
  );
}

async function startReplicatedPostgresOnce(options: ReplicatedPostgresOptions): Promise<ReplicatedPostgres> {
  const dir = mkdtempSync(join(tmpdir(), 'idem-pg-repl-'));
  const primaryData = join(dir, 'primary');
  const standbyData = join(dir, 'standby');
  if (process.getuid?.() === 0) {
    const { stdout: uid } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    chownSync(dir, Number(uid.trim()), Number(gid.trim()));
  }
  const [primaryPort, standbyPort] = [await reservePort(), await reservePort()];
  const url = (port: number) => `postgres://postgres@127.0.0.1:${port}/postgres`;
  const startServer = (data: string, port: number, log: string) =>
    asPostgres('pg_ctl', [
      '-D',
      data,
      '-l',
      join(dir, log),
      '-w',
      '-t',
      '60',
      '-o',
      `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c max_connections=60 -c fsync=on -c wal_level=replica ` +
        '-c max_wal_senders=4 -c hot_standby=on -c wal_sender_timeout=60s -c wal_receiver_timeout=60s',
      'start',
    ]);

  // startPipe reads the target's port at each new connection: changing it moves the service.
  const serviceTarget = { port: primaryPort };
  const service = await startPipe(serviceTarget);
  let held = false;
  const proxy = await startPipe({ port: primaryPort }, (client) => ({
    // Held: the WAL from the primary stays here and is never delivered.
    fromServer: (chunk) => {
      if (!held) client.write(chunk);
    },
  }));

  // If the test process exits without stop() (a crash, a timeout), the servers die with it.
  const killOnExit = () => {
    for (const data of [standbyData, primaryData]) {
      const pid = postmasterPid(data);
      if (pid === undefined || !alive(pid)) continue;
      signal(pid, 'SIGSTOP');
      for (const p of [...childrenOf(pid), pid]) signal(p, 'SIGKILL');
    }
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', killOnExit);
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    process.off('exit', killOnExit);
    for (const data of [standbyData, primaryData]) {
      const pid = postmasterPid(data);
      if (pid !== undefined && alive(pid)) {
        await asPostgres('pg_ctl', ['-D', data, '-m', 'immediate', '-w', '-t', '30', 'stop']).catch(() => {});
        if (alive(pid)) await killTree(pid).catch(() => {});
      }
    }
    await proxy.close();
    await service.close();
    rmSync(dir, { recursive: true, force: true });
    releasePort(primaryPort, standbyPort);
  };
  /** A start's error, with the ends of the servers' logs. */
  const withLogs = (error: unknown) => {
    const logs = ['primary.log', 'standby.log']
      .map((log) => [log, logTail(join(dir, log), 8)])
      .filter(([, tail]) => tail !== '')
      .map(([log, tail]) => `\n${log} ends:\n${tail}`)
      .join('');
    return new Error(`${error instanceof Error ? error.message : String(error)}${logs}`, { cause: error });
  };

  try {
    await asPostgres('initdb', ['-D', primaryData, '-U', 'postgres', '-A', 'trust', '--no-sync', '--no-instructions']);
    await startServer(primaryData, primaryPort, 'primary.log');
    const migrating = new pg.Pool({ connectionString: url(primaryPort), max: 1 });
    await migrateIdempotencyKeys(drizzle(migrating), {
      migrationsFolder: MIGRATIONS,
      migrationsTable: MIGRATIONS_TABLE,
    });
    await migrating.end();
    await asPostgres('pg_basebackup', [
      '-D',
      standbyData,
      '-h',
      '127.0.0.1',
      '-p',
      String(primaryPort),
      '-U',
      'postgres',
      '-X',
      'stream',
      '-c',
      'fast',
      '--no-sync',
      '-R',
    ]);
    // A later line of postgresql.auto.conf wins: the standby streams through the proxy, under its name.
    appendFileSync(
      join(standbyData, 'postgresql.auto.conf'),
      `primary_conninfo = 'host=127.0.0.1 port=${proxy.port} user=postgres application_name=${STANDBY_NAME}'\n`,
    );
    await startServer(standbyData, standbyPort, 'standby.log');
    if (options.synchronous !== false) {
      const admin = new pg.Client({ connectionString: url(primaryPort) });
      await admin.connect();
      try {
        await admin.query(`alter system set synchronous_standby_names = '${STANDBY_NAME}'`);
        await admin.query(`alter system set synchronous_commit = '${options.synchronous}'`);
        await admin.query('select pg_reload_conf()');
      } finally {
        await admin.end();
      }
    }
  } catch (error) {
    const failure = withLogs(error);
    await stop();
    throw failure;
  }

  const syncState = async () => {
    const client = new pg.Client({ connectionString: url(primaryPort) });
    await client.connect();
    try {
      const { rows } = await client.query(
        "select sync_state from pg_stat_replication where application_name = $1 and state = 'streaming'",
        [STANDBY_NAME],
      );
      return rows[0]?.sync_state as string | undefined;
    } finally {
      await client.end();
    }
  };
  try {
    // The standby streams (and, if asked, is the synchronous one) before the caller writes.
    const want = options.synchronous === false ? 'async' : 'sync';
    const until = Date.now() + 30_000;
    for (let state = await syncState(); state !== want; state = await syncState()) {
      if (Date.now() > until) throw new Error(`the standby is ${state ?? 'not streaming'}, not ${want}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } catch (error) {
    const failure = withLogs(error);
    await stop();
    throw failure;
  }

  return {
    primary: { port: primaryPort, url: url(primaryPort) },
    standby: { port: standbyPort, url: url(standbyPort) },
    service: { port: service.port, url: url(service.port) },
    serviceToStandby() {
      serviceTarget.port = standbyPort;
    },
    syncState,
    holdStream() {
      held = true;
    },
    async killPrimary() {
      const pid = postmasterPid(primaryData);
      if (pid === undefined) throw new Error('the primary is not running');
      await killTree(pid);
      proxy.cutAll(); // what was held is dropped with the connection
      service.cutAll();
    },
    async promote() {
      await asPostgres('pg_ctl', ['-D', standbyData, '-w', '-t', '60', 'promote']);
    },
    stop,
  };
}

/**
 * Ports for the servers the tests start themselves (redis-server, Sentinels,
 * Cluster buses, PostgreSQL), and retries for starting them.
 *
 * Why not a port the kernel picks (`listen(0)`, closed, then given to the
 * server): that port is free only until someone else takes it, and between
 * its close and the server's bind (a proxy started first, a cluster's other
 * nodes, initdb and pg_basebackup: seconds on a busy machine) anyone may:
 * - another vitest worker (two fault files run side by side) asking the
 *   kernel for a port, for a server of its own or an HTTP app (`listen(0)`);
 * - any outgoing connection of any process: the kernel gives connections
 *   their local port from the same range (`ip_local_port_range`, 32768-60999),
 *   and a port a connection holds cannot be bound by a server.
 * The server then fails to bind and exits, and the harness, polling the port,
 * sees only "Connection is closed" (or, worse, talks to whoever holds it).
 *
 * So the ports handed out here lie below the kernel's ephemeral range, where
 * neither `listen(0)` nor a connection ever lands, and each is reserved across
 * every process of the machine by a lock file (`<tmpdir>/idem-test-ports/<port>`,
 * created exclusively, holding the owner's pid) before it is checked free: two
 * workers, or two suites run at once, never get the same one. A reservation
 * ends with `releasePort`, or when its process exits; one whose process died
 * without removing it (SIGKILL) is taken over.
 */
import {
  chmodSync,
  closeSync,
  linkSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const DIR = join(tmpdir(), 'idem-test-ports');
/** The lowest port handed out (below it: well-known and commonly configured services). */
const LOW = 10_000;
/** One past the highest: the first port of the kernel's ephemeral range. */
const HIGH = ephemeralStart();

function ephemeralStart(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    // a range that starts too low leaves no room below it: then share with it (the lock files still apply)
    if (Number.isInteger(low) && low >= LOW + 12_000) return Math.min(low, 65_536);
  } catch {} // not Linux
  return 32_768;
}

/** Ports this process holds a reservation for. */
const held = new Set<number>();
process.once('exit', () => {
  for (const port of held) {
    try {
      unlinkSync(lockOf(port));
    } catch {}
  }
});

const lockOf = (port: number) => join(DIR, String(port));

let dirReady = false;
function ensureDir() {
  if (dirReady) return;
  mkdirSync(DIR, { recursive: true });
  try {
    chmodSync(DIR, 0o1777); // shared by every user who runs the tests here (CI as root, a developer as himself)
  } catch {} // another user's directory: it is open to everyone already
  dirReady = true;
  // Once per process: the locks of processes that died without removing them (a worker killed by a signal)
  // (takeOverStale removes such a lock, and leaves any other alone).
  for (const name of readdirSync(DIR)) if (/^\d+$/.test(name)) takeOverStale(lockOf(Number(name)));
}

function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Removes the lock at `path` if the process that holds it is gone; answers
 * whether the port may be tried again. The stale file is renamed away first,
 * then checked: if another process had replaced it meanwhile (its fresh lock
 * was renamed, not the stale one), it is put back.
 */
function takeOverStale(path: string): boolean {
  let owner: string;
  try {
    owner = readFileSync(path, 'utf8');
  } catch {
    return true; // removed meanwhile
  }
  const pid = Number(owner);
  // empty: being written by its owner right now
  if (!(Number.isInteger(pid) && pid > 0) || running(pid)) return false;
  const aside = `${path}.stale.${process.pid}`;
  try {
    renameSync(path, aside);
  } catch {
    return true; // taken over by another process meanwhile: try it (its new owner's lock wins, if any)
  }
  let moved = '';
  try {
    moved = readFileSync(aside, 'utf8');
  } catch {}
  if (moved !== owner) {
    try {
      linkSync(aside, path); // a live lock: back where it was
    } catch {}
    try {
      unlinkSync(aside);
    } catch {}
    return false;
  }
  unlinkSync(aside);
  return true;
}

function lock(port: number): boolean {
  const path = lockOf(port);
  for (let attempt = 0; attempt < 2; attempt++) {
    let fd: number;
    try {
      fd = openSync(path, 'wx');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      if (takeOverStale(path)) continue;
      return false;
    }
    try {
      writeSync(fd, String(process.pid));
    } finally {
      closeSync(fd);
    }
    held.add(port);
    return true;
  }
  return false;
}

/** Whether a server could listen on `port` on loopback now (nothing outside these reservations holds it). */
function bindable(port: number): Promise<boolean> {
  const server = createServer();
  return new Promise((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

export interface ReservePortOptions {
  /**
   * Also reserve `port + companion` (a Redis Cluster node's bus port when
   * `redis-cli --cluster create` is left to find it: the node's port + 10000).
   */
  companion?: number;
}

/**
 * A port no other test process of this machine holds, below the ephemeral
 * range, that no server listens on now; reserved for this process until
 * `releasePort` (or its exit). With `companion`, `port + companion` is
 * reserved too (and released with it).
 */
export async function reservePort(options: ReservePortOptions = {}): Promise<number> {
  const companion = options.companion ?? 0;
  ensureDir();
  const span = HIGH - companion - LOW;
  if (span <= 0) throw new Error(`no room for a port and its companion +${companion} below ${HIGH}`);
  for (let tries = 0; tries < 500; tries++) {
    const port = LOW + Math.floor(Math.random() * span);
    if (held.has(port) || (companion > 0 && held.has(port + companion))) continue;
    if (!lock(port)) continue;
    if (companion > 0 && !lock(port + companion)) {
      unlock(port);
      continue;
    }
    if ((await bindable(port)) && (companion === 0 || (await bindable(port + companion)))) {
      if (companion > 0) companions.set(port, port + companion);
      return port;
    }
    // held by something outside these reservations: leave it
    unlock(port);
    if (companion > 0) unlock(port + companion);
  }
  throw new Error(`no free port found in ${LOW}-${HIGH - 1} (reservations in ${DIR})`);
}

/** Companion ports reserved with a port, released with it. */
const companions = new Map<number, number>();

function unlock(port: number) {
  if (!held.delete(port)) return;
  try {
    unlinkSync(lockOf(port));
  } catch {}
}

/** Ends the reservation of ports `reservePort` answered (their servers are gone); unknown ports are ignored. */
export function releasePort(...ports: number[]): void {
  for (const port of ports) {
    const companion = companions.get(port);
    companions.delete(port);
    unlock(port);
    if (companion !== undefined) unlock(companion);
  }
}

/** A start that failed in a way a new attempt may not: given up at once. */
export class FatalStartError extends Error {}

/**
 * Runs `start` up to `attempts` times, until it resolves. Each attempt must
 * stop whatever it started before it throws (the helpers' starts do). A
 * failure is taken as transient (a port taken between its check and the
 * server's bind, a cluster or replica slow to converge on a loaded machine)
 * unless it is a `FatalStartError`. The final error names `what` and every
 * attempt's failure.
 */
export async function withStartAttempts<T>(
  what: string,
  attempts: number,
  start: (attempt: number) => Promise<T>,
): Promise<T> {
  const failures: string[] = [];
  for (let attempt = 1; ; attempt++) {
    try {
      return await start(attempt);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      failures.push(`attempt ${attempt}: ${message}`);
      if (error instanceof FatalStartError || attempt >= attempts) {
        throw new Error(
          `could not start ${what} (${failures.length} attempt${failures.length > 1 ? 's' : ''}):\n  ${failures.join('\n  ')}`,
          {
            cause: error,
          },
        );
      }
      console.warn(`[test servers] starting ${what} failed, trying again: ${message}`);
    }
  }
}

/** The last `lines` lines of a log file, for an error message (empty if it cannot be read). */
export function logTail(path: string, lines = 15): string {
  try {
    return readFileSync(path, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

/**
 * `Promise.all` for starts run side by side, but settling every one before
 * it throws: a start still under way when another failed would otherwise come
 * up after its topology was stopped, and outlive it.
 */
export async function allStarted<T>(starts: Promise<T>[]): Promise<T[]> {
  const settled = await Promise.allSettled(starts);
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed !== undefined) throw failed.reason;
  return settled.map((s) => (s as PromiseFulfilledResult<T>).value);
}

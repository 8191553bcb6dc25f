/**
 * The one place a test starts a redis-server (or a Sentinel): on a port of its own
 * (test/helpers/ports.ts), in a directory of its own, logging to a file there, and
 * ready once it answers PING. It can be killed (SIGKILL: a crash; SIGTERM: a clean
 * shutdown), paused, and started again on the same port and directory. The private
 * servers (redis-server.ts), the restartable one (redis-process.ts) and the
 * topologies (redis-topology.ts) are built on it.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { logTail, releasePort, reservePort, withStartAttempts } from './ports.js';

/** Every server started here and not seen to exit: SIGKILLed at the latest when this process exits. */
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export interface SpawnRedisOptions {
  /**
   * redis-server's arguments, before the port, directory and log file this adds
   * (a config file, a Sentinel's, comes first). Nothing is added for persistence:
   * say `--save ''`, `--appendonly no` where nothing may be kept on disk.
   */
  args?: string[];
  /**
   * A port the caller reserved, and releases. By default one is reserved here,
   * a start that fails is tried again on another (3 times), and `destroy()`
   * releases it.
   */
  port?: number;
  /**
   * A directory the caller owns (a topology's, shared by its servers): kept by
   * `destroy()`. By default a new temporary one, which `destroy()` deletes.
   */
  dir?: string;
  /** The log file is `<name>.log` in the directory. @default 'redis' */
  name?: string;
}

export interface RedisServerProcess {
  readonly port: number;
  readonly dir: string;
  /** The running process: undefined once `kill()` was called, until `start()` runs it again. */
  readonly process: ChildProcess | undefined;
  /** The log file's path, for an error message. */
  readonly log: string;
  /**
   * Starts it (again) on the same port, directory and arguments; resolves once
   * it answers PING. If it does not, it is killed and this throws, with the
   * log's tail.
   */
  start(): Promise<void>;
  /**
   * Sends `signal` and resolves once it exited; nothing if it is not running.
   * A paused server is continued first (it would not act on SIGTERM).
   * @default 'SIGKILL'
   */
  kill(signal?: 'SIGKILL' | 'SIGTERM'): Promise<void>;
  /** SIGSTOP: the server hangs, its connections stay open and unanswered. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** Kills it (SIGKILL), then deletes the directory and releases the port if they were made here. Once only. */
  destroy(): Promise<void>;
}

/** A redis-server started and answering PING, per `options`. */
export async function spawnRedis(options: SpawnRedisOptions = {}): Promise<RedisServerProcess> {
  if (options.port !== undefined) return spawnOn(options.port, false, options);
  // a start that fails (its port taken between the check and the bind) is tried again on another port
  return withStartAttempts(`a redis-server${options.name === undefined ? '' : ` (${options.name})`}`, 3, async () =>
    spawnOn(await reservePort(), true, options),
  );
}

async function spawnOn(port: number, ownPort: boolean, options: SpawnRedisOptions): Promise<RedisServerProcess> {
  const ownDir = options.dir === undefined;
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), 'idem-redis-'));
  const logName = `${options.name ?? 'redis'}.log`;
  const log = join(dir, logName);
  const args = [...(options.args ?? []), '--port', String(port), '--dir', dir, '--logfile', logName];
  let child: ChildProcess | undefined;
  let exited = Promise.resolve();

  async function start() {
    if (child !== undefined && child.exitCode === null && child.signalCode === null) {
      throw new Error(`redis-server on port ${port} is running already`);
    }
    const proc = spawn('redis-server', args, { stdio: 'ignore' });
    child = proc;
    running.add(proc);
    exited = new Promise<void>((resolve) =>
      proc.once('exit', () => {
        running.delete(proc);
        resolve();
      }),
    );
    try {
      await waitForRedis(port, proc, { log });
    } catch (error) {
      await kill();
      throw error;
    }
  }

  function kill(signal: 'SIGKILL' | 'SIGTERM' = 'SIGKILL'): Promise<void> {
    const proc = child;
    child = undefined;
    if (proc !== undefined && proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGCONT');
      proc.kill(signal);
    }
    return exited;
  }

  let destroying: Promise<void> | undefined;
  const destroy = () =>
    (destroying ??= (async () => {
      await kill();
      if (ownDir) rmSync(dir, { recursive: true, force: true });
      if (ownPort) releasePort(port);
    })());

  try {
    await start();
  } catch (error) {
    await destroy();
    throw error;
  }
  return {
    port,
    dir,
    log,
    get process() {
      return child;
    },
    start,
    kill,
    pause: () => void child?.kill('SIGSTOP'),
    resume: () => void child?.kill('SIGCONT'),
    destroy,
  };
}

export interface WaitForRedisOptions {
  /** How long the server may take to answer PING (ms). @default 30_000 */
  timeoutMs?: number;
  /** The server's log file: its last lines go into the error. */
  log?: string;
}

/**
 * Resolves once the redis-server on `port` answers PING (with an append-only
 * file it answers LOADING until it has replayed it). With `child`, the server
 * that answers must be that process (`INFO server`'s process_id), and this
 * throws as soon as it exits. Throws after `timeoutMs`, with the server's
 * log tail when `log` is given.
 */
export async function waitForRedis(
  port: number,
  child?: ChildProcess,
  { timeoutMs = 30_000, log }: WaitForRedisOptions = {},
): Promise<void> {
  const deadline = performance.now() + timeoutMs; // monotonic: a VM's wall clock can step
  const failure = (what: string) => {
    const tail = log === undefined ? '' : logTail(log, 6);
    return new Error(`${what}${tail === '' ? '' : `; its log ends:\n${tail}`}`);
  };
  let lastError: unknown;
  for (;;) {
    if (child !== undefined && (child.exitCode !== null || child.signalCode !== null)) {
      throw failure(`redis-server for port ${port} exited (${child.exitCode ?? child.signalCode}) before it answered`);
    }
    const probe = new Redis({
      port,
      host: '127.0.0.1',
      lazyConnect: true,
      retryStrategy: () => null,
      maxRetriesPerRequest: 0,
      connectTimeout: 5_000,
      // a holder of the port that never answers (not a Redis) must not hang the wait
      commandTimeout: 5_000,
    });
    probe.on('error', () => {});
    try {
      await probe.connect();
      await probe.ping();
      if (child !== undefined) {
        const pid = /^process_id:(\d+)/m.exec(await probe.info('server'))?.[1];
        if (Number(pid) !== child.pid) {
          // someone else's server holds the port: ours cannot bind it, and will exit
          throw failure(`port ${port} is held by another server (pid ${pid}), not by redis-server ${child.pid}`);
        }
      }
      return;
    } catch (error) {
      if (error instanceof Error && error.message.startsWith(`port ${port} is held`)) throw error;
      lastError = error;
    } finally {
      probe.disconnect();
    }
    if (performance.now() > deadline) {
      const last = lastError instanceof Error ? lastError.message : String(lastError);
      throw failure(`redis-server on port ${port} did not answer PING within ${timeoutMs} ms (last error: ${last})`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50)); // a poll's interval: the server gives no sign it is up
  }
}

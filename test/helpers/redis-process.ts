import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { releasePort, reservePort, withStartAttempts } from './ports.js';
import { waitForRedis } from './redis-server.js';

export interface ControlledRedis {
  port: number;
  url: string;
  /** The running server process (undefined while killed). */
  readonly process: ChildProcess | undefined;
  /** SIGKILL: a crash. What survives depends on `persist`. */
  kill(): Promise<void>;
  /** Starts it again on the same port and data directory. */
  start(): Promise<void>;
  /** SIGSTOP: the server hangs, connections stay open and unanswered. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** Kills it for good and deletes its directory. */
  destroy(): Promise<void>;
}

/**
 * A redis-server of the test's own that can be killed, paused and started
 * again on the same port (startPrivateRedis cannot restart). With `persist`,
 * every write is in the append-only file before it is acknowledged
 * (`appendfsync always`), so a SIGKILL loses nothing that was answered;
 * without it, a restart comes back empty.
 */
export async function startControlledRedis(options: { persist?: boolean } = {}): Promise<ControlledRedis> {
  // a first start that fails (its port taken meanwhile) is tried again on another port
  return withStartAttempts('a controlled redis-server', 3, async () => {
    const port = await reservePort();
    try {
      return await startControlledRedisOn(port, options);
    } catch (error) {
      releasePort(port);
      throw error;
    }
  });
}

async function startControlledRedisOn(port: number, options: { persist?: boolean }): Promise<ControlledRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'idem-redis-ctl-'));
  const persistence = options.persist ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no'];
  let child: ChildProcess | undefined;

  async function start() {
    const proc = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--dir',
        dir,
        '--logfile',
        'redis.log',
        ...persistence,
      ],
      {
        stdio: 'ignore',
      },
    );
    child = proc;
    try {
      await waitForRedis(port, proc, { log: join(dir, 'redis.log') });
    } catch (error) {
      await kill();
      throw error;
    }
  }

  function kill(): Promise<void> {
    const proc = child;
    child = undefined;
    if (proc === undefined || proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => {
      proc.once('exit', () => resolve());
      proc.kill('SIGCONT'); // a paused process would not die of SIGKILL any later, but stay clean
      proc.kill('SIGKILL');
    });
  }

  try {
    await start();
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    get process() {
      return child;
    },
    kill,
    start,
    pause: () => void child?.kill('SIGSTOP'),
    resume: () => void child?.kill('SIGCONT'),
    async destroy() {
      await kill();
      rmSync(dir, { recursive: true, force: true });
      releasePort(port);
    },
  };
}

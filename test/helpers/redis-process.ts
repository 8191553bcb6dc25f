import type { ChildProcess } from 'node:child_process';
import { spawnRedis } from './redis-spawn.js';

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
  const persistence = options.persist ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no'];
  const server = await spawnRedis({ args: ['--bind', '127.0.0.1', '--save', '', ...persistence] });
  return {
    port: server.port,
    url: `redis://127.0.0.1:${server.port}`,
    get process() {
      return server.process;
    },
    kill: () => server.kill('SIGKILL'),
    start: server.start,
    pause: server.pause,
    resume: server.resume,
    destroy: server.destroy,
  };
}

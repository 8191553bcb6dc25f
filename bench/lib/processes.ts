/**
 * The processes of a bench run: the servers under test (`bench/server.ts`, one per variant) and
 * the load generator (`bench/load.ts`, commands over IPC), shared by `run.ts` and `ab.ts`.
 */
import { type ChildProcess, fork, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { LoadCommand, LoadResult } from '../load.js';

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url));

/** What to undo at the end (or on Ctrl-C), last first. */
export type Cleanups = (() => unknown)[];

export async function runCleanups(cleanups: Cleanups): Promise<void> {
  for (const fn of cleanups.splice(0).reverse()) {
    // One that fails, even before it returns a promise, does not keep the others from running.
    try {
      await fn();
    } catch {}
  }
}

/**
 * On Ctrl-C: runs the cleanups (which never reject), then exits with 130, as a shell reports SIGINT.
 * What was running then fails as its servers go away: those errors are the interruption's, and must
 * not end the process before the cleanups have stopped the servers and removed the files.
 */
export function exitOnInterrupt(cleanups: Cleanups): void {
  process.once('SIGINT', () => {
    process.on('uncaughtException', () => {});
    process.on('unhandledRejection', () => {});
    void runCleanups(cleanups).finally(() => process.exit(130));
  });
}

/**
 * SIGTERM, then SIGKILL if it has not exited within 10 s; resolves once it has exited (a server under
 * valgrind still writes its dump as it exits: the files it writes to may be removed only after that).
 */
function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

export interface Server {
  variant: string;
  url: string;
  pid: number;
  child: ChildProcess;
}

/** How to run a server: under another command, or as another script. */
export interface ServerCommand {
  /** A command and its arguments to run it under (`taskset -c 0`, valgrind). */
  prefix?: string[];
  /** Node's arguments before the variant; default: `bench/server.ts` through tsx. */
  script?: string[];
  /** Node's own flags, before the script. */
  nodeFlags?: string[];
}

/**
 * Starts `bench/server.ts <variant>` on a free port and resolves once it prints `{"ready":port}`.
 */
export function startServer(
  variant: string,
  env: Record<string, string>,
  cleanups: Cleanups,
  { prefix = [], script = ['--import', 'tsx', here('../server.ts')], nodeFlags = [] }: ServerCommand = {},
): Promise<Server> {
  const args = [...nodeFlags, ...script, variant];
  const [command, ...rest] = prefix.length > 0 ? [...prefix, process.execPath, ...args] : [process.execPath, ...args];
  const child: ChildProcess = spawn(command!, rest, {
    env: { ...process.env, ...env, PORT: '0', NODE_ENV: 'production' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  cleanups.push(() => stop(child));
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /\{"ready":(\d+)\}/.exec(out);
      if (match) resolve({ variant, url: `http://127.0.0.1:${match[1]}`, pid: child.pid!, child });
    });
    child.once('exit', (code) => reject(new Error(`server ${variant} exited with ${code} before it was ready`)));
  });
}

export interface LoadGenerator {
  readonly pid: number;
  /** Runs one command in the load process, `connections` sockets at most. */
  load(command: Omit<LoadCommand, 'id' | 'connections'>): Promise<LoadResult>;
}

/** Forks the load process (`bench/load.ts`), killed by the cleanups. */
export function startLoad(connections: number, cleanups: Cleanups): LoadGenerator {
  const worker = fork(here('../load.ts'), [], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  cleanups.push(() => void worker.kill());
  // A load process that dies (a missing dependency, a crash) fails the command waiting on it, rather than leaving it waiting.
  let exited: Error | undefined;
  worker.once('exit', (code, signal) => {
    exited = new Error(`load: the load process exited (${signal ?? `code ${code}`})`);
  });
  let commandId = 0;
  return {
    pid: worker.pid!,
    load(command) {
      const id = ++commandId;
      return new Promise((resolve, reject) => {
        if (exited !== undefined) return reject(exited);
        const onMessage = (message: { ok: boolean; result?: LoadResult; id?: number; error?: string }) => {
          if ((message.result?.id ?? message.id) !== id) return;
          done();
          if (message.ok) resolve(message.result!);
          else reject(new Error(`load: ${message.error}`));
        };
        const onExit = () => {
          done();
          reject(exited);
        };
        const done = () => {
          worker.off('message', onMessage);
          worker.off('exit', onExit);
        };
        worker.on('message', onMessage);
        worker.once('exit', onExit);
        worker.send({ ...command, id, connections });
      });
    },
  };
}

/**
 * Completes the replay keys before replays are measured, and checks that they replay (the load process
 * sends some of them again and counts the `Idempotent-Replayed` answers). Fresh keys need nothing.
 */
export async function primeKeys(generator: LoadGenerator, name: string, server: Server, keys: LoadCommand['keys']) {
  if (keys.mode !== 'replay') return;
  const primed = await generator.load({ type: 'prime', url: server.url, keys });
  if (primed.non2xx > 0 || primed.replayChecked !== Math.min(20, keys.count)) {
    throw new Error(
      `${name}: priming the replay keys failed (${primed.non2xx} errors, ${primed.replayChecked} replays checked)`,
    );
  }
}

/**
 * A fresh server's warm-up, so that V8 has optimised its code before anything is measured (it takes
 * ~5,000 requests): `requests` of each kind it will be measured on, replays on keys of its own.
 */
export async function warmUp(
  generator: LoadGenerator,
  name: string,
  server: Server,
  modes: Iterable<'fresh' | 'replay'>,
  { requests, replayKeys }: { requests: number; replayKeys: number },
) {
  for (const mode of modes) {
    const keys: LoadCommand['keys'] =
      mode === 'fresh' ? { mode } : { mode, prefix: `${name}-warm-up`, count: replayKeys };
    await primeKeys(generator, name, server, keys);
    const result = await generator.load({ type: 'run', url: server.url, amount: requests, keys });
    if (result.non2xx + result.errors > 0) {
      throw new Error(`${name}: ${result.non2xx} non-2xx answers and ${result.errors} errors while warming up`);
    }
  }
}

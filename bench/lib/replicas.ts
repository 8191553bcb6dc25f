/**
 * A primary and its replica of the bench's own (redis-server with `--replicaof`, on free ports,
 * nothing on disk), for the Redis store's `waitForReplicas`: started, and stopped, by the bench.
 * Optionally under another command (valgrind), for the server's instruction counts.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

/** A free TCP port on loopback. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export interface BenchRedisNode {
  port: number;
  url: string;
  pid: number;
  stop(): Promise<void>;
}

/**
 * A redis-server on a free port, no persistence, loopback only; `prefix`: a command to run it under
 * (`valgrind --tool=callgrind ...`: pid is then valgrind's, which is the server's own process).
 */
export async function startRedisNode(extraArgs: string[] = [], prefix: string[] = []): Promise<BenchRedisNode> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'bench-redis-'));
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir];
  const [command, ...rest] = [...prefix, 'redis-server', ...args, ...extraArgs];
  const child: ChildProcess = spawn(command!, rest, { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(prefix.length > 0 ? 'SIGTERM' : 'SIGKILL');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await until(port, child, async (probe) => (await probe.ping()) === 'PONG');
  } catch (error) {
    await stop();
    throw new Error(`redis-server did not start on port ${port} (is redis-server installed?)`, { cause: error });
  }
  return { port, url: `redis://127.0.0.1:${port}`, pid: child.pid!, stop };
}

/** Polls a fresh connection to `port` until `ready` answers true; throws if `child` exits or after ~20 s. */
async function until(port: number, child: ChildProcess, ready: (probe: Redis) => Promise<boolean>): Promise<void> {
  for (let i = 0; ; i++) {
    const probe = new Redis({ port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    probe.on('error', () => {});
    let ok = false;
    let failure: unknown;
    try {
      await probe.connect();
      ok = await ready(probe);
    } catch (error) {
      failure = error;
    }
    probe.disconnect();
    if (ok) return;
    if (i > 400 || child.exitCode !== null) throw failure ?? new Error(`redis-server on ${port} never became ready`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

export interface BenchReplicaPair {
  primary: BenchRedisNode;
  replica: BenchRedisNode;
  stop(): Promise<void>;
}

/**
 * A primary and one replica of it, resolved once the primary counts the replica as online;
 * `primaryPrefix`: a command to run the primary under (see {@link startRedisNode}).
 */
export async function startReplicaPair(primaryPrefix: string[] = []): Promise<BenchReplicaPair> {
  const primary = await startRedisNode([], primaryPrefix);
  let replica: BenchRedisNode;
  try {
    replica = await startRedisNode(['--replicaof', '127.0.0.1', String(primary.port)]);
  } catch (error) {
    await primary.stop();
    throw error;
  }
  const stop = async () => {
    await replica.stop();
    await primary.stop();
  };
  const admin = new Redis(primary.url);
  try {
    for (let i = 0; !/^slave0:.*state=online/m.test(await admin.info('replication')); i++) {
      if (i > 400) throw new Error('the bench replica never came online');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } catch (error) {
    await stop();
    throw error;
  } finally {
    admin.disconnect();
  }
  return { primary, replica, stop };
}

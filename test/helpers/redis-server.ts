import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

/** A free TCP port on loopback. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export interface PrivateRedis {
  port: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

/** A redis-server of the test's own, on its own port, keeping nothing on disk. */
export async function startPrivateRedis(extraArgs: string[] = []): Promise<PrivateRedis> {
  return startPrivateRedisOn(await freePort(), extraArgs);
}

async function startPrivateRedisOn(port: number, extraArgs: string[]): Promise<PrivateRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'idem-redis-'));
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...extraArgs],
    {
      stdio: 'ignore',
    },
  );
  await waitForRedis(port, child);
  return {
    port,
    process: child,
    stop: () =>
      new Promise<void>((resolve) => {
        child.once('exit', () => {
          rmSync(dir, { recursive: true, force: true });
          resolve();
        });
        child.kill('SIGKILL');
      }),
  };
}

/**
 * Resolves once the redis-server on `port` answers PING (with an append-only
 * file it answers LOADING until it has replayed it); throws if `child` exits first.
 */
export async function waitForRedis(port: number, child?: ChildProcess): Promise<void> {
  for (let i = 0; ; i++) {
    const probe = new Redis({ port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    probe.on('error', () => {});
    try {
      await probe.connect();
      await probe.ping();
      probe.disconnect();
      return;
    } catch (error) {
      probe.disconnect();
      if (i > 200 || (child !== undefined && child.exitCode !== null)) throw error;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
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

async function portIsFree(port: number): Promise<boolean> {
  const server = createServer();
  return new Promise((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

export interface PrivateCluster {
  ports: number[];
  stop(): Promise<void>;
}

/**
 * A Redis Cluster of `masters` nodes, each with `replicas` replicas, on ports
 * of its own, created with `redis-cli --cluster create`. Each node also needs
 * its cluster bus port (port + 10000) free. `ports` lists every node.
 */
export async function startPrivateCluster(masters = 3, replicas = 0): Promise<PrivateCluster> {
  const ports: number[] = [];
  while (ports.length < masters * (1 + replicas)) {
    const port = 20_000 + Math.floor(Math.random() * 20_000);
    if (!ports.includes(port) && (await portIsFree(port)) && (await portIsFree(port + 10_000))) ports.push(port);
  }
  const nodes = await Promise.all(
    ports.map((port) =>
      startPrivateRedisOn(port, ['--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`]),
    ),
  );
  const create = spawn(
    'redis-cli',
    [
      '--cluster',
      'create',
      ...ports.map((p) => `127.0.0.1:${p}`),
      '--cluster-replicas',
      String(replicas),
      '--cluster-yes',
    ],
    {
      stdio: 'ignore',
    },
  );
  const code = await new Promise<number | null>((resolve) => create.once('exit', resolve));
  if (code !== 0) throw new Error(`redis-cli --cluster create exited with ${code}`);
  for (const port of ports) {
    const probe = new Redis({ port });
    const ready = async () => {
      if (!(await probe.cluster('INFO')).includes('cluster_state:ok')) return false;
      const replication = await probe.info('replication');
      return !replication.includes('role:slave') || replication.includes('master_link_status:up');
    };
    for (let i = 0; !(await ready()); i++) {
      if (i > 200) throw new Error(`cluster node ${port} never reached cluster_state:ok (and, a replica, its master)`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    probe.disconnect();
  }
  return { ports, stop: async () => void (await Promise.all(nodes.map((n) => n.stop()))) };
}

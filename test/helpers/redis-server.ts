import { type ChildProcess, spawn } from 'node:child_process';
import { Redis } from 'ioredis';
import { allStarted, releasePort, reservePort, withStartAttempts } from './ports.js';
import { type RedisServerProcess, spawnRedis } from './redis-spawn.js';

export { type WaitForRedisOptions, waitForRedis } from './redis-spawn.js';

/**
 * A port for a server of the test's own, reserved for this process (see
 * test/helpers/ports.ts: never one the kernel may hand to another process).
 */
export const freePort = (): Promise<number> => reservePort();

export interface PrivateRedis {
  port: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

/** How many times a server's start is tried (each on other ports) before its error goes up. */
const START_ATTEMPTS = 3;

/** Loopback only, nothing kept on disk. */
const PRIVATE = ['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];

/** The server as a {@link PrivateRedis}: stopped for good (SIGKILL), its directory deleted, `released()` then. */
function privateRedis(server: RedisServerProcess, released: () => void = () => {}): PrivateRedis {
  let stopping: Promise<void> | undefined;
  return {
    port: server.port,
    process: server.process!,
    stop: () => (stopping ??= server.destroy().then(released)),
  };
}

/** A redis-server of the test's own, on its own port, keeping nothing on disk. */
export async function startPrivateRedis(extraArgs: string[] = []): Promise<PrivateRedis> {
  return privateRedis(await spawnRedis({ args: [...PRIVATE, ...extraArgs] }));
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

export interface PrivateCluster {
  ports: number[];
  stop(): Promise<void>;
}

/** Cluster bus port offset `redis-cli --cluster create` relies on: a node's port + 10000. */
const BUS_OFFSET = 10_000;

/**
 * A Redis Cluster of `masters` nodes, each with `replicas` replicas, on ports
 * of its own, created with `redis-cli --cluster create`. Each node's cluster
 * bus port (port + 10000) is reserved with its port. `ports` lists every node.
 * A start that fails (a port taken meanwhile, a cluster slow to agree on a
 * loaded machine) is tried again on other ports; nothing of a failed attempt
 * is left running.
 */
export async function startPrivateCluster(masters = 3, replicas = 0): Promise<PrivateCluster> {
  return withStartAttempts(`a Redis Cluster (${masters} masters, ${replicas} replicas each)`, START_ATTEMPTS, () =>
    startPrivateClusterOnce(masters, replicas),
  );
}

async function startPrivateClusterOnce(masters: number, replicas: number): Promise<PrivateCluster> {
  const nodes: PrivateRedis[] = [];
  const probes: Redis[] = [];
  const stop = async () => {
    for (const probe of probes) probe.disconnect();
    await Promise.all(nodes.map((n) => n.stop()));
  };
  try {
    await allStarted(
      Array.from({ length: masters * (1 + replicas) }, () =>
        withStartAttempts('a Redis Cluster node', START_ATTEMPTS, async () => {
          const port = await reservePort({ companion: BUS_OFFSET });
          try {
            const args = [...PRIVATE, '--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`];
            nodes.push(privateRedis(await spawnRedis({ port, args }), () => releasePort(port)));
          } catch (error) {
            releasePort(port);
            throw error;
          }
        }),
      ),
    );
    const ports = nodes.map((n) => n.port);
    await createCluster(ports, replicas);
    const deadline = Date.now() + 30_000;
    for (const port of ports) {
      const probe = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1, retryStrategy: () => 100 });
      probe.on('error', () => {});
      probes.push(probe);
      const ready = async () => {
        if (!(await probe.cluster('INFO')).includes('cluster_state:ok')) return false;
        const replication = await probe.info('replication');
        return !replication.includes('role:slave') || replication.includes('master_link_status:up');
      };
      while (!(await ready().catch(() => false))) {
        if (Date.now() > deadline) {
          throw new Error(
            `cluster node ${port} did not reach cluster_state:ok (and, a replica, its master) within 30 s`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      probe.disconnect();
    }
    return { ports, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** `redis-cli --cluster create` on the nodes; throws with its output if it fails or takes over 60 s. */
async function createCluster(ports: number[], replicas: number): Promise<void> {
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
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  create.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  create.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const timer = setTimeout(() => create.kill('SIGKILL'), 60_000);
  const code = await new Promise<number | null>((resolve) => create.once('exit', resolve));
  clearTimeout(timer);
  if (code !== 0) {
    throw new Error(
      `redis-cli --cluster create exited with ${code ?? 'a timeout'}: ${output.trim().split('\n').slice(-10).join('\n')}`,
    );
  }
}

/**
 * Replicated Redis topologies of a test's own, for failover tests: a primary,
 * its replicas and 3 Sentinels (`startSentinelSet`), or a Redis Cluster with
 * replicas per master (`startClusterWithReplicas`), every process on free
 * private ports with its own temporary directory, nothing kept on disk. Two
 * replicas per primary by default: after a failover, the promoted one still
 * has a replica (with `waitForReplicas`, a primary without one refuses writes).
 *
 * Each replica's replication stream runs through a replication proxy that
 * holds the primary's bytes back for `delayMs` (a replica that lags, as one
 * across a busy network does) and drops what it still holds when the primary
 * dies: what the replicas had not received by then is lost with the primary,
 * as it is in production. The proxies run in a process of their own (this
 * file run as a script), so that a busy test process cannot stall them.
 *
 * Why the proxy sits in front of the primary for everyone, and tells
 * replication connections from client connections by their first commands,
 * rather than only between the primary and its replica: both Sentinel and
 * Cluster check the address a replica replicates from.
 * - Sentinel "fixes" a replica whose `master_host:master_port` differs from the
 *   master's address it monitors (`+fix-slave-config`, once `failover-timeout`
 *   has passed): pointed at a proxy of its own, the replica would be moved back
 *   onto the primary's own port, and the delay would vanish in the middle of a
 *   test. So Sentinel monitors the primary at the proxy's port.
 * - In a Cluster, a replica replicates from its master's address as the
 *   cluster announces it (`CLUSTER REPLICATE` takes a node id, not an
 *   address). So each master announces its proxy's port
 *   (`cluster-announce-port`), and its real cluster bus port.
 * Clients (ioredis, the Sentinels) then reach the primary through the proxy
 * too, and must not be delayed: a connection is delayed only once it has
 * spoken replication (`REPLCONF`, `PSYNC`, `SYNC`: a replica's handshake sends
 * `REPLCONF` right after its first `PING`); every other connection passes
 * through untouched. (ioredis's `natMap` would map addresses for the client
 * only: it cannot move the replica's link.)
 *
 * Every process this file starts is SIGKILLed by `stop()`, and by the
 * process's exit if a test never got to call it.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { createSentinel } from 'redis';
import type { RedisClient } from '../../src/redis.js';
import { allStarted, releasePort, reservePort, withStartAttempts } from './ports.js';
import { startPipe } from './proxy.js';
import { spawnRedis } from './redis-spawn.js';

/**
 * How many times a topology's start is tried before its error goes up: each
 * attempt on new ports and a new directory, everything of the failed one
 * stopped first. A start fails for a transient reason now and then on a
 * loaded machine (a cluster slow to agree, a replica slow to sync).
 */
const START_ATTEMPTS = 3;
/** How many times one server's start is tried (each on new ports) within a topology's attempt. */
const SERVER_ATTEMPTS = 3;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The proxies' host process, while it runs: killed at the latest when this process exits (redis-spawn.ts does so for the servers). */
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

// ---------------------------------------------------------------------------
// The replication proxy

export interface ReplicationProxy {
  port: number;
  /** Connections that have spoken replication so far (the replica's link, once per (re)connection). */
  readonly replicationLinks: number;
  /** Bytes of the primary's replication stream held back at this moment, not yet forwarded. */
  readonly heldBytes: number;
  /** Bytes dropped by `kill()` (or a closed connection): held back, never delivered. */
  readonly droppedBytes: number;
  /**
   * The primary died: every byte still held back is dropped (never flushed),
   * every connection is cut, and the port stops accepting (a dead host).
   */
  kill(): void;
  close(): Promise<void>;
}

/** A replication connection speaks one of these in its first bytes (RESP arrays: `$7\r\nREPLCONF\r\n`...). */
const REPLICATION = /\r\n(REPLCONF|PSYNC|SYNC)\r\n/i;
/** How much of a connection's first bytes are looked at. */
const SNIFF_BYTES = 1024;

/**
 * A TCP proxy in front of a primary on `targetPort`. Bytes towards the
 * primary pass at once; bytes from the primary to a connection that has
 * spoken replication are held back `delayMs`, in order. When the primary's
 * side of a connection closes (the primary died) or `kill()` is called,
 * what is held is dropped and the other side is closed.
 */
export async function startReplicationProxy(targetPort: number, delayMs: number): Promise<ReplicationProxy> {
  let replicationLinks = 0;
  let droppedBytes = 0;
  let heldBytes = 0;
  let dead = false;
  const drops = new Set<() => void>();

  const pipe = await startPipe({ port: targetPort }, (client, upstream) => {
    let sniffed = 0;
    let replication = false;
    const held: { due: number; chunk: Buffer }[] = [];
    let timer: NodeJS.Timeout | undefined;
    const drop = () => {
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      for (const { chunk } of held.splice(0)) {
        droppedBytes += chunk.length;
        heldBytes -= chunk.length;
      }
      drops.delete(drop);
    };
    drops.add(drop);
    // Whichever side closes first, what is held never reaches the replica (the pipe then closes the other side).
    upstream.once('close', drop);
    client.once('close', drop);
    const release = () => {
      timer = undefined;
      const now = Date.now();
      while (held.length > 0 && held[0]!.due <= now) {
        const { chunk } = held.shift()!;
        heldBytes -= chunk.length;
        client.write(chunk);
      }
      if (held.length > 0) timer = setTimeout(release, held[0]!.due - now);
    };
    return {
      fromClient(chunk) {
        if (!replication && sniffed < SNIFF_BYTES) {
          sniffed += chunk.length;
          if (REPLICATION.test(chunk.toString('latin1'))) {
            replication = true;
            replicationLinks++;
          }
        }
        upstream.write(chunk);
      },
      fromServer(chunk) {
        if (dead || client.destroyed) return;
        if (!replication || delayMs <= 0) {
          client.write(chunk);
          return;
        }
        held.push({ due: Date.now() + delayMs, chunk });
        heldBytes += chunk.length;
        timer ??= setTimeout(release, delayMs);
      },
    };
  });

  let closing: Promise<void> | undefined;
  const kill = () => {
    dead = true;
    for (const drop of [...drops]) drop();
    closing ??= pipe.close();
  };
  return {
    port: pipe.port,
    get replicationLinks() {
      return replicationLinks;
    },
    get heldBytes() {
      return heldBytes;
    },
    get droppedBytes() {
      return droppedBytes;
    },
    kill,
    close: () => {
      kill();
      return closing!;
    },
  };
}

// ---------------------------------------------------------------------------
// The proxies' own process

/**
 * What a topology holds of its proxies: they run in a process of their own
 * (this file, run as a script), so that a busy test process cannot stall them.
 * In the test's process, a pause of its event loop (a burst of requests, a
 * garbage collection, a machine busy with other suites: 500 ms were seen)
 * held the Sentinels' PINGs to the primary long enough for them to fail it
 * over before the test killed it.
 */
export interface RemoteProxy {
  port: number;
  /** What the proxy saw so far (see {@link ReplicationProxy}). */
  stats(): Promise<{ replicationLinks: number; heldBytes: number; droppedBytes: number }>;
  /**
   * Waits (up to `maxWaitMs`) until at least `whenHeld` bytes of the
   * replication stream are held back, then kills the proxy (see
   * {@link ReplicationProxy.kill}); answers what it dropped, and when (Date.now()).
   */
  kill(whenHeld?: number, maxWaitMs?: number): Promise<{ droppedBytes: number; killedAt: number }>;
  close(): Promise<void>;
}

type HostRequest =
  | { op: 'start'; target: number; delayMs: number }
  | { op: 'stats' | 'close'; proxy: number }
  | { op: 'kill'; proxy: number; whenHeld: number; maxWaitMs: number };
type HostReply = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: string };

let host: Promise<{ child: ChildProcess; ask(request: HostRequest): Promise<unknown> }> | undefined;

/** The proxies' process, started once per test process; it ends with it. */
function proxyHost() {
  host ??= new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    });
    running.add(child);
    child.once('exit', () => running.delete(child));
    const pending = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();
    let next = 0;
    // It must not keep the test process alive (it ends with it: on 'exit', and when its IPC channel closes),
    // but the channel keeps the event loop alive while an answer is awaited.
    const channel = child.channel as { ref(): void; unref(): void } | null | undefined;
    child.unref();
    const idle = () => {
      if (pending.size === 0) channel?.unref();
    };
    child.on('message', (message: HostReply | 'ready') => {
      if (message === 'ready') {
        resolve({
          child,
          ask: (request) =>
            new Promise((resolveReply, rejectReply) => {
              const id = next++;
              pending.set(id, { resolve: resolveReply, reject: rejectReply });
              channel?.ref();
              child.send({ id, ...request });
            }),
        });
        idle();
        return;
      }
      const waiting = pending.get(message.id);
      pending.delete(message.id);
      idle();
      if (message.ok) waiting?.resolve(message.value);
      else waiting?.reject(new Error(message.error));
    });
    child.once('exit', (code, signal) => {
      const error = new Error(`the replication proxies' process exited (${code ?? signal})`);
      reject(error);
      for (const waiting of pending.values()) waiting.reject(error);
      pending.clear();
      host = undefined;
    });
  });
  return host;
}

/** A replication proxy (see {@link startReplicationProxy}) in the proxies' process. */
export async function startRemoteReplicationProxy(targetPort: number, delayMs: number): Promise<RemoteProxy> {
  const { ask } = await proxyHost();
  const { proxy, port } = (await ask({ op: 'start', target: targetPort, delayMs })) as { proxy: number; port: number };
  let closed: Promise<void> | undefined;
  return {
    port,
    stats: async () =>
      (await ask({ op: 'stats', proxy })) as { replicationLinks: number; heldBytes: number; droppedBytes: number },
    kill: async (whenHeld = 0, maxWaitMs = 0) =>
      (await ask({ op: 'kill', proxy, whenHeld, maxWaitMs })) as { droppedBytes: number; killedAt: number },
    close: () => (closed ??= ask({ op: 'close', proxy }).then(() => undefined)),
  };
}

/** This file run as a script: the proxies' process, driven by its parent over IPC. */
function hostProxies() {
  const proxies = new Map<number, ReplicationProxy>();
  let next = 0;
  const handle = async (request: HostRequest): Promise<unknown> => {
    if (request.op === 'start') {
      const proxy = await startReplicationProxy(request.target, request.delayMs);
      proxies.set(next, proxy);
      return { proxy: next++, port: proxy.port };
    }
    const proxy = proxies.get(request.proxy);
    if (proxy === undefined) throw new Error(`no proxy ${request.proxy}`);
    if (request.op === 'stats') {
      const { replicationLinks, heldBytes, droppedBytes } = proxy;
      return { replicationLinks, heldBytes, droppedBytes };
    }
    if (request.op === 'kill') {
      const giveUp = Date.now() + request.maxWaitMs;
      while (proxy.heldBytes < request.whenHeld && Date.now() < giveUp) await sleep(1);
      proxy.kill();
      return { droppedBytes: proxy.droppedBytes, killedAt: Date.now() };
    }
    await proxy.close();
    proxies.delete(request.proxy);
    return null;
  };
  process.on('message', (message: HostRequest & { id: number }) => {
    handle(message).then(
      (value) => process.send?.({ id: message.id, ok: true, value }),
      (error: unknown) => process.send?.({ id: message.id, ok: false, error: String(error) }),
    );
  });
  process.on('disconnect', () => process.exit(0));
  process.send?.('ready');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) hostProxies();

// ---------------------------------------------------------------------------
// Processes

interface Server {
  port: number;
  /** Whether its process runs (neither killed nor exited). */
  alive(): boolean;
  /** SIGKILL; resolves once it exited. */
  kill(): Promise<void>;
}

/** Common settings: loopback only, nothing on disk, a full sync started at once (diskless, no 5 s wait for more replicas). */
const BASE = ['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--repl-diskless-sync-delay', '0'];

/** A server of the topology on `port` (reserved by the caller), its log `<name>.log` in the topology's `dir`. */
async function startServer(dir: string, name: string, port: number, args: string[]): Promise<Server> {
  const server = await spawnRedis({ port, dir, name, args });
  return {
    port,
    alive: () => server.process !== undefined && server.process.exitCode === null && server.process.signalCode === null,
    kill: () => server.kill('SIGKILL'),
  };
}

/**
 * The ports a topology reserved (test/helpers/ports.ts), released once its
 * servers are gone.
 */
function portBook() {
  const ports: number[] = [];
  return {
    async take(): Promise<number> {
      const port = await reservePort();
      ports.push(port);
      return port;
    },
    release(...some: number[]) {
      releasePort(...some);
      for (const port of some) {
        const i = ports.indexOf(port);
        if (i >= 0) ports.splice(i, 1);
      }
    },
    releaseAll() {
      releasePort(...ports.splice(0));
    },
  };
}

/** A server of a topology started on a port of `book`'s, tried again on another if it does not come up. */
async function startServerOnNewPort(
  book: ReturnType<typeof portBook>,
  dir: string,
  name: string,
  args: string[],
): Promise<Server> {
  return withStartAttempts(`redis-server ${name}`, SERVER_ATTEMPTS, async () => {
    const own = await book.take();
    try {
      return await startServer(dir, name, own, args);
    } catch (error) {
      book.release(own);
      throw error;
    }
  });
}

/** A connection for the harness's own checks: fails fast rather than queueing, or hanging on a server that does not answer. */
function probe(port: number): Redis {
  const client = new Redis({
    port,
    host: '127.0.0.1',
    maxRetriesPerRequest: 1,
    retryStrategy: () => 100,
    commandTimeout: 10_000,
  });
  client.on('error', () => {});
  return client;
}

/**
 * Polls `check` every 50 ms until it returns true; throws `what` after
 * `timeoutMs` (on the monotonic clock: the wall clock of a virtual machine can
 * step), with what `seen()` says of the last state. Errors count as false.
 * `extendBy()`, asked after each false check, may push the deadline back once
 * by the ms it answers (a Sentinel in TILT mode acts again only 30 s later).
 */
async function until(
  what: string,
  timeoutMs: number,
  check: () => Promise<boolean>,
  seen: () => string = () => '',
  extendBy: () => number = () => 0,
): Promise<void> {
  let deadline = performance.now() + timeoutMs;
  let extended = false;
  let lastError: unknown;
  for (;;) {
    if (
      await check().catch((error: unknown) => {
        lastError = error;
        return false;
      })
    )
      return;
    if (!extended) {
      const more = extendBy();
      if (more > 0) {
        extended = true;
        deadline += more;
        timeoutMs += more;
      }
    }
    if (performance.now() > deadline) {
      const last = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last} ${seen()}`.trim());
    }
    await sleep(50);
  }
}

/** `INFO <section>` as a map of its `field:value` lines. */
async function info(client: Redis, section: string): Promise<Map<string, string>> {
  const text = await client.info(section);
  const fields = new Map<string, string>();
  for (const line of text.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0) fields.set(line.slice(0, colon), line.slice(colon + 1));
  }
  return fields;
}

/** A flat [field, value, ...] reply (SENTINEL MASTER) as a map. */
function pairs(flat: unknown): Map<string, string> {
  const list = flat as string[];
  const fields = new Map<string, string>();
  for (let i = 0; i + 1 < list.length; i += 2) fields.set(String(list[i]), String(list[i + 1]));
  return fields;
}

/** Resolves once the replica on `replica` has a live link and the primary on `primary` counts it online. */
async function waitForReplication(primary: Redis, replica: Redis, replicaPort: number, timeoutMs: number) {
  await until(`the replica on ${replicaPort} to sync`, timeoutMs, async () => {
    const [p, r] = await Promise.all([info(primary, 'replication'), info(replica, 'replication')]);
    const online = [...p.values()].some((v) => v.includes(`port=${replicaPort},state=online`));
    return online && r.get('master_link_status') === 'up';
  });
}

// ---------------------------------------------------------------------------
// Sentinel

export interface KillOptions {
  /** Kill once the proxy holds at least this many bytes of the replication stream back. @default 0 */
  whenHeld?: number;
  /** How long to wait for that (ms); then kill anyway. @default 0 */
  maxWaitMs?: number;
}

export interface SentinelSetOptions {
  /** How long the primary's replication stream is held back on its way to each replica (ms). */
  delayMs: number;
  /**
   * Replicas of the primary, each replicating through the proxy. Two by
   * default: after a failover one is left to acknowledge writes (with
   * `waitForReplicas: { replicas: 1 }`, a primary without a replica refuses them all).
   * @default 2
   */
  replicas?: number;
  /**
   * `down-after-milliseconds`: how long the Sentinels wait for a PING's answer before the primary
   * is down. Well above Sentinel's PING period (1 s): with 1 s, on a loaded machine, two of three
   * Sentinels marked the primary they had just switched to down 1.05 s after the switch (no PING
   * of theirs answered yet; answered 0.1 s later) and failed it over again: the client stayed on
   * the first promoted replica, a primary without a replica, and every write was refused until
   * Sentinel demoted it.
   * @default 2_000
   */
  downAfterMs?: number;
  /** @default 2_000 */
  failoverTimeoutMs?: number;
}

export interface SentinelSet {
  /** The name the Sentinels monitor the primary under (ioredis `name`). */
  name: string;
  /** Where the Sentinels listen (ioredis `sentinels`). */
  sentinels: { host: string; port: number }[];
  /** The primary's own port, its port as everyone reaches it (the proxy's), the replicas' and the Sentinels'. */
  ports: { primary: number; primaryProxy: number; replicas: number[]; sentinels: number[] };
  proxy: RemoteProxy;
  /**
   * SIGKILLs the primary, once its proxy holds `whenHeld` bytes of the
   * replication stream back (waiting up to `maxWaitMs`); the proxy drops them.
   * Throws if the Sentinels no longer name the primary as the master (a
   * failover before the kill would make the trial meaningless).
   */
  killPrimary(options?: KillOptions): Promise<{ droppedBytes: number; killedAt: number }>;
  /**
   * Resolves once every Sentinel names the same replica as the master and
   * that replica says it is one; answers its port and how long that took.
   */
  waitForFailover(timeoutMs?: number): Promise<{ port: number; tookMs: number }>;
  /** Kills every process and deletes the directory. */
  stop(): Promise<void>;
}

/**
 * A primary, its replicas (`replicaof` the primary through a replication
 * proxy) and 3 Sentinels (quorum 2) monitoring the primary at the proxy's
 * address. Resolves once the replicas are in sync and every Sentinel knows
 * them and the two other Sentinels, so that a failover can start as soon as
 * the primary is down. Takes about 2.5 s (Sentinels find each other by hello
 * messages, sent every 2 s).
 */
export async function startSentinelSet(options: SentinelSetOptions): Promise<SentinelSet> {
  return withStartAttempts('a Sentinel set', START_ATTEMPTS, () => startSentinelSetOnce(options));
}

async function startSentinelSetOnce(options: SentinelSetOptions): Promise<SentinelSet> {
  const { delayMs, replicas: replicaCount = 2, downAfterMs = 2_000, failoverTimeoutMs = 2_000 } = options;
  const name = 'failover';
  const dir = mkdtempSync(join(tmpdir(), 'idem-sentinel-'));
  const servers: Server[] = [];
  const clients: Redis[] = [];
  const book = portBook();
  let proxy: RemoteProxy | undefined;
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      for (const client of clients) client.disconnect();
      await Promise.all([proxy?.close().catch(() => {}), ...servers.map((s) => s.kill())]);
      rmSync(dir, { recursive: true, force: true });
      book.releaseAll();
    })());
  try {
    const primary = await startServerOnNewPort(book, dir, 'primary', BASE);
    servers.push(primary);
    const proxyPort = (proxy = await startRemoteReplicationProxy(primary.port, delayMs)).port;
    const replicas = await allStarted(
      Array.from({ length: replicaCount }, async (_, i) => {
        const replica = await startServerOnNewPort(book, dir, `replica-${i}`, [
          ...BASE,
          '--replicaof',
          '127.0.0.1',
          String(proxyPort),
          '--replica-announce-ip',
          '127.0.0.1',
        ]);
        servers.push(replica);
        return replica;
      }),
    );
    const p = probe(primary.port);
    const r = replicas.map((replica) => probe(replica.port));
    clients.push(p, ...r);
    await allStarted(replicas.map((replica, i) => waitForReplication(p, r[i]!, replica.port, 30_000)));

    const sentinels = await allStarted(
      [0, 1, 2].map(async (i) => {
        const conf = join(dir, `sentinel-${i}.conf`);
        writeFileSync(
          conf,
          [
            'bind 127.0.0.1',
            `sentinel monitor ${name} 127.0.0.1 ${proxyPort} 2`,
            `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
            `sentinel failover-timeout ${name} ${failoverTimeoutMs}`,
            `sentinel parallel-syncs ${name} ${replicaCount}`,
            '',
          ].join('\n'),
        );
        const sentinel = await startServerOnNewPort(book, dir, `sentinel-${i}`, [conf, '--sentinel']);
        servers.push(sentinel);
        return sentinel;
      }),
    );
    const sentinelPorts = sentinels.map((s) => s.port);
    const sentinelClients = sentinelPorts.map(probe);
    clients.push(...sentinelClients);
    /** The ports of the Sentinels in TILT mode. */
    const tilted = async () => {
      const modes = await Promise.all(
        sentinelClients.map(async (s) => (await info(s, 'sentinel')).get('sentinel_tilt')),
      );
      return sentinelPorts.filter((_, i) => modes[i] === '1');
    };
    // Sentinels find the replicas in the primary's INFO and each other by their hello messages (every 2 s).
    await until('the Sentinels to know the replicas and each other', 30_000, async () => {
      const masters = await Promise.all(sentinelClients.map((s) => s.call('SENTINEL', 'MASTER', name)));
      return masters.every((m) => {
        const fields = pairs(m);
        return fields.get('num-slaves') === String(replicaCount) && fields.get('num-other-sentinels') === '2';
      });
    });
    if ((await proxy.stats()).replicationLinks < replicaCount) {
      throw new Error('a replica does not replicate through the proxy');
    }

    return {
      name,
      sentinels: sentinelPorts.map((port) => ({ host: '127.0.0.1', port })),
      ports: {
        primary: primary.port,
        primaryProxy: proxyPort,
        replicas: replicas.map((replica) => replica.port),
        sentinels: sentinelPorts,
      },
      proxy,
      async killPrimary({ whenHeld = 0, maxWaitMs = 0 }: KillOptions = {}) {
        // A Sentinel in TILT mode (its timer ran 2 s late, or the wall clock stepped) fails nothing over for 30 s.
        await until('the Sentinels to leave TILT mode', 45_000, async () => (await tilted()).length === 0);
        const named = await Promise.all(
          sentinelClients.map((s) => s.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name) as Promise<string[]>),
        );
        if (!named.every((address) => Number(address[1]) === proxyPort)) {
          throw new Error(`the Sentinels failed the primary over before it was killed: ${JSON.stringify(named)}`);
        }
        const dropped = await proxy!.kill(whenHeld, maxWaitMs);
        await primary.kill();
        return dropped;
      },
      async waitForFailover(timeoutMs = 30_000) {
        const started = performance.now();
        let port = 0;
        let tilt: number[] = [];
        let tiltSeen = false;
        const check = async () => {
          tilt = await tilted();
          if (tilt.length > 0) tiltSeen = true;
          const addresses = await Promise.all(
            sentinelClients.map((s) => s.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name) as Promise<string[]>),
          );
          const named = new Set(addresses.map((a) => Number(a[1])));
          if (named.size !== 1) return false;
          port = [...named][0]!;
          const i = replicas.findIndex((replica) => replica.port === port);
          return i >= 0 && (await info(r[i]!, 'replication')).get('role') === 'master';
        };
        await until(
          'the Sentinels to promote a replica',
          timeoutMs,
          check,
          () => (tiltSeen ? `(Sentinels in TILT mode at the last look: ${tilt.join(', ') || 'none'})` : ''),
          // TILT mode (entered when a Sentinel's timer runs 2 s late or the wall clock steps) lasts 30 s
          () => (tiltSeen ? 35_000 : 0),
        );
        return { port, tookMs: Math.round(performance.now() - started) };
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

// ---------------------------------------------------------------------------
// Cluster

export interface ClusterOptions {
  /** @default 3 */
  masters?: number;
  /** Replicas of each master. Two by default, for the reason given at `SentinelSetOptions.replicas`. @default 2 */
  replicasPerMaster?: number;
  /** How long each master's replication stream is held back on its way to its replicas (ms). */
  delayMs: number;
  /** `cluster-node-timeout`: a master unreachable this long is failing, and a replica fails over on its own. @default 1_000 */
  nodeTimeoutMs?: number;
}

export interface ClusterNode {
  /** The node's own port. */
  port: number;
  /** Its cluster bus port. */
  busPort: number;
}

export interface ClusterWithReplicas {
  /** Master i, as the cluster announces it at `proxies[i].port`. */
  masters: ClusterNode[];
  /** The replicas of master i (each announced at its own port). */
  replicas: ClusterNode[][];
  proxies: RemoteProxy[];
  /** Where clients start (ioredis `Cluster` startup nodes): every node as the cluster announces it. */
  startupNodes: { host: string; port: number }[];
  /** Master i's slot range. */
  slots: [number, number][];
  /**
   * SIGKILLs master i as `SentinelSet.killPrimary` kills the primary; throws
   * if it is no longer a master serving its slots.
   */
  killMaster(i: number, options?: KillOptions): Promise<{ droppedBytes: number; killedAt: number }>;
  /**
   * Resolves once one of master i's replicas is a master, serves master i's
   * slots in the view of every live node, and every live node says
   * cluster_state:ok; answers its port and how long that took.
   */
  waitForFailover(i: number, timeoutMs?: number): Promise<{ port: number; tookMs: number }>;
  /** Kills every process and deletes the directory. */
  stop(): Promise<void>;
}

const SLOTS = 16_384;

/**
 * A Redis Cluster of `masters` masters with their replicas, built by hand
 * (ADDSLOTSRANGE, MEET, REPLICATE: `redis-cli --cluster create` would meet
 * the nodes at the addresses given to it, not the announced ones). Each master
 * announces its replication proxy's port, so that its replicas' links, and
 * every client, go through the proxy; failover is the cluster's own
 * (automatic, after `cluster-node-timeout`). Takes about 2 s.
 */
export async function startClusterWithReplicas(options: ClusterOptions): Promise<ClusterWithReplicas> {
  return withStartAttempts('a Redis Cluster with replicas', START_ATTEMPTS, () =>
    startClusterWithReplicasOnce(options),
  );
}

async function startClusterWithReplicasOnce(options: ClusterOptions): Promise<ClusterWithReplicas> {
  const { masters: count = 3, replicasPerMaster = 2, delayMs, nodeTimeoutMs = 1_000 } = options;
  const dir = mkdtempSync(join(tmpdir(), 'idem-cluster-'));
  const servers: Server[] = [];
  const clients: Redis[] = [];
  const proxies: RemoteProxy[] = [];
  /** Every proxy started, including those of a node whose server did not come up. */
  const allProxies: RemoteProxy[] = [];
  const book = portBook();
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      for (const client of clients) client.disconnect();
      await Promise.all([...allProxies.map((p) => p.close().catch(() => {})), ...servers.map((s) => s.kill())]);
      rmSync(dir, { recursive: true, force: true });
      book.releaseAll();
    })());
  /**
   * A cluster node on two new ports (its own and its bus's), announcing the
   * port `announcePort` gives (a master's proxy, started towards its own
   * port before the server), tried again on new ports if it does not come up.
   */
  const node = (name: string, announcePort?: (port: number) => Promise<RemoteProxy>) =>
    withStartAttempts(`cluster node ${name}`, SERVER_ATTEMPTS, async () => {
      const own = await book.take();
      const busPort = await book.take();
      let proxy: RemoteProxy | undefined;
      try {
        if (announcePort !== undefined) allProxies.push((proxy = await announcePort(own)));
        const announced = proxy?.port ?? own;
        const server = await startNode(name, own, busPort, announced);
        servers.push(server);
        const client = probe(own);
        clients.push(client);
        return { server, client, node: { port: own, busPort }, announced, proxy };
      } catch (error) {
        await proxy?.close().catch(() => {});
        book.release(own, busPort);
        throw error;
      }
    });
  const startNode = (name: string, own: number, busPort: number, announced: number) =>
    startServer(dir, name, own, [
      ...BASE,
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      `nodes-${name}.conf`,
      '--cluster-node-timeout',
      String(nodeTimeoutMs),
      '--cluster-port',
      String(busPort),
      '--cluster-announce-ip',
      '127.0.0.1',
      '--cluster-announce-port',
      String(announced),
      '--cluster-announce-bus-port',
      String(busPort),
    ]);
  try {
    const masters = await allStarted(
      Array.from({ length: count }, async (_, i) => {
        const master = await node(`master-${i}`, (own) => startRemoteReplicationProxy(own, delayMs));
        proxies[i] = master.proxy!;
        return master;
      }),
    );
    const replicas = await allStarted(
      Array.from({ length: count }, (_, i) =>
        allStarted(Array.from({ length: replicasPerMaster }, (_, j) => node(`replica-${i}-${j}`))),
      ),
    );
    const all = [...masters, ...replicas.flat()];
    const slots = masters.map((_, i): [number, number] => [
      Math.floor((i * SLOTS) / count),
      Math.floor(((i + 1) * SLOTS) / count) - 1,
    ]);
    await Promise.all(masters.map((m, i) => m.client.call('CLUSTER', 'ADDSLOTSRANGE', slots[i]![0], slots[i]![1])));
    for (const other of all.slice(1)) {
      await all[0]!.client.call('CLUSTER', 'MEET', '127.0.0.1', other.node.port, other.node.busPort);
    }
    const ids = await Promise.all(masters.map((m) => m.client.call('CLUSTER', 'MYID') as Promise<string>));
    let views: string[] = [];
    await until(
      'every node to know every other',
      30_000,
      async () => {
        views = await Promise.all(all.map((n) => n.client.call('CLUSTER', 'NODES') as Promise<string>));
        return views.every((view) => {
          const lines = view.trim().split('\n');
          return lines.length === all.length && lines.every((l) => !/handshake|noaddr/.test(l));
        });
      },
      () => `(ports ${all.map((n) => `${n.node.port}/${n.node.busPort}`).join(' ')}; views: ${views.join(' | ')})`,
    );
    await Promise.all(replicas.flatMap((group, i) => group.map((r) => r.client.call('CLUSTER', 'REPLICATE', ids[i]!))));
    await allStarted(
      replicas.flatMap((group, i) =>
        group.map((r) => waitForReplication(masters[i]!.client, r.client, r.node.port, 30_000)),
      ),
    );
    await until('cluster_state:ok on every node', 30_000, async () => {
      const states = await Promise.all(all.map((n) => n.client.call('CLUSTER', 'INFO') as Promise<string>));
      return states.every((s) => s.includes('cluster_state:ok'));
    });
    for (const [i, proxy] of proxies.entries()) {
      if ((await proxy.stats()).replicationLinks < replicasPerMaster) {
        throw new Error(`a replica of master ${i} does not replicate through its master's proxy`);
      }
    }

    return {
      masters: masters.map((m) => m.node),
      replicas: replicas.map((group) => group.map((r) => r.node)),
      proxies,
      startupNodes: all.map((n) => ({ host: '127.0.0.1', port: n.announced })),
      slots,
      async killMaster(i, { whenHeld = 0, maxWaitMs = 0 }: KillOptions = {}) {
        const role = (await masters[i]!.client.call('ROLE')) as [string];
        const ranges = (await replicas[i]![0]!.client.call('CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
        const owner = ranges.find(([from, to]) => from <= slots[i]![0] && slots[i]![0] <= to)?.[2][1];
        if (role[0] !== 'master' || owner !== proxies[i]!.port) {
          throw new Error(`master ${i} was failed over before it was killed (role ${role[0]}, slots on ${owner})`);
        }
        const dropped = await proxies[i]!.kill(whenHeld, maxWaitMs);
        await masters[i]!.server.kill();
        return dropped;
      },
      async waitForFailover(i, timeoutMs = 30_000) {
        const started = performance.now();
        const live = all.filter((n) => n.server.alive());
        const candidates = replicas[i]!;
        let promoted = 0;
        await until(`a replica of master ${i} to take over`, timeoutMs, async () => {
          const roles = await Promise.all(
            candidates.map(async (r) => (await info(r.client, 'replication')).get('role')),
          );
          const j = roles.indexOf('master');
          if (j < 0) return false;
          promoted = candidates[j]!.node.port;
          for (const n of live) {
            if (!((await n.client.call('CLUSTER', 'INFO')) as string).includes('cluster_state:ok')) return false;
            const ranges = (await n.client.call('CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
            const owner = ranges.find(([from, to]) => from <= slots[i]![0] && slots[i]![0] <= to);
            if (owner?.[2][1] !== promoted) return false;
          }
          return true;
        });
        return { port: promoted, tookMs: Math.round(performance.now() - started) };
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** An ioredis and a node-redis client of a Sentinel set, by library, and how to close both. */
export interface SentinelClients {
  clients: Record<'ioredis' | 'node-redis', RedisClient>;
  close(): Promise<void>;
}

/** Connects an ioredis and a node-redis (`createSentinel`) Sentinel client to `set`; their errors are ignored. */
export async function connectSentinelClients(set: SentinelSet): Promise<SentinelClients> {
  const ioredis = new Redis({ sentinels: set.sentinels, name: set.name });
  ioredis.on('error', () => {});
  const nodeRedis = createSentinel({ name: set.name, sentinelRootNodes: set.sentinels });
  nodeRedis.on('error', () => {});
  try {
    await nodeRedis.connect();
  } catch (error) {
    ioredis.disconnect();
    throw error;
  }
  return {
    clients: { ioredis, 'node-redis': nodeRedis },
    async close() {
      ioredis.disconnect();
      await Promise.resolve(nodeRedis.destroy()).catch(() => {});
    },
  };
}

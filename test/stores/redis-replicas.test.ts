/**
 * The Redis store's durable mode (`waitForReplicas`): every write waits for
 * Redis's `WAIT` on its own connection, so the operation runs, and the answer
 * goes out, only once the replicas hold the claim and the outcome. A private
 * primary with one replica; the replica stopped (SIGSTOP) stands for one that
 * lags or is gone.
 */
import { randomUUID } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import { createClient, createCluster } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIdempotencyEngine, IdempotencyConfigError } from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import type { RedisClient } from '../../src/stores/redis/client.js';
import { keySlot } from '../../src/stores/redis/fence.js';
import { CLAIM } from '../../src/stores/redis/scripts.js';
import { startTcpProxy, type TcpProxy } from '../helpers/proxy.js';
import {
  commandCalls,
  delta,
  type PrivateCluster,
  type PrivateRedis,
  startPrivateCluster,
  startPrivateRedis,
} from '../helpers/redis-server.js';

const LOCK = 5_000;
const ACKS = { replicas: 1, timeout: 300 };

let primary: PrivateRedis;
let replica: PrivateRedis;
let client: Redis;
let onReplica: Redis;

beforeAll(async () => {
  primary = await startPrivateRedis();
  replica = await startPrivateRedis(['--replicaof', '127.0.0.1', String(primary.port)]);
  client = new Redis({ port: primary.port });
  nodeClient = createClient({ url: `redis://127.0.0.1:${primary.port}` });
  nodeClient.on('error', () => {});
  await nodeClient.connect();
  onReplica = new Redis({ port: replica.port });
  for (let tries = 0; !(await onReplica.info('replication')).includes('master_link_status:up'); tries++) {
    if (tries === 200) throw new Error('the replica did not sync with its primary within 10 s');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}, 30_000);
afterAll(async () => {
  client?.disconnect();
  await nodeClient?.close();
  onReplica?.disconnect();
  replica?.process.kill('SIGCONT');
  await Promise.all([primary?.stop(), replica?.stop()]);
});

/** Runs `fn` with the replica stopped: it neither applies nor acknowledges anything until resumed. */
async function withReplicaStopped<T>(fn: () => Promise<T>): Promise<T> {
  replica.process.kill('SIGSTOP');
  try {
    return await fn();
  } finally {
    replica.process.kill('SIGCONT');
  }
}

const id = () => `:replicas:${randomUUID()}`;

let nodeClient: ReturnType<typeof createClient>;
/** The store's client: ioredis, and node-redis. Every reading of the servers goes through the ioredis clients. */
const CLIENTS: [string, () => RedisClient][] = [
  ['ioredis', () => client],
  ['node-redis', () => nodeClient],
];

describe.each(CLIENTS)('waitForReplicas, on %s', (_library, storeClient) => {
  it('a claim and a completion answer once the replica holds them', async () => {
    const store = redisStore({ client: storeClient(), prefix: 'acked:', waitForReplicas: ACKS });
    const record = id();
    expect(await store.claim({ id: record, fingerprint: 'fp', token: 't', lockTtl: LOCK })).toMatchObject({
      state: 'acquired',
    });
    expect(await onReplica.hgetall(store.keyOf(record))).toMatchObject({ s: 'p', t: 't' });
    await store.complete({ id: record, fingerprint: 'fp', token: 't', state: 'completed', body: '"ok"', ttl: 60_000 });
    expect(await onReplica.hgetall(store.keyOf(record))).toMatchObject({ s: 'c', b: '"ok"' });
  });

  it('too few replicas within the timeout: the claim fails closed and is given back; a store without the option takes it', async () => {
    const store = redisStore({ client: storeClient(), prefix: 'acked:', waitForReplicas: ACKS });
    const plain = redisStore({ client: storeClient(), prefix: 'acked:' });
    const record = id();
    await withReplicaStopped(async () => {
      await expect(store.claim({ id: record, fingerprint: 'fp', token: 't', lockTtl: LOCK })).rejects.toThrow(
        '0 replica(s) acknowledged a write within 300 ms; waitForReplicas asks for 1.',
      );
      // given back on the primary: a retry is not held off for lockTtl
      await expect.poll(() => client.exists(store.keyOf(record))).toBe(0);
      expect(await plain.claim({ id: record, fingerprint: 'fp', token: 'u', lockTtl: LOCK })).toMatchObject({
        state: 'acquired',
      });
    });
  });

  it('a claim that took nothing (a replay, a key in flight) answers without the replica: only taking a record must reach it', async () => {
    const store = redisStore({ client: storeClient(), prefix: 'acked:', waitForReplicas: ACKS });
    const done = id();
    const held = id();
    await store.claim({ id: done, fingerprint: 'fp', token: 't', lockTtl: LOCK });
    await store.complete({ id: done, fingerprint: 'fp', token: 't', state: 'completed', body: '"ok"', ttl: 60_000 });
    await store.claim({ id: held, fingerprint: 'fp', token: 't', lockTtl: LOCK });
    await withReplicaStopped(async () => {
      expect(await store.claim({ id: done, fingerprint: 'fp', token: 'u', lockTtl: LOCK })).toEqual({
        state: 'completed',
        fingerprint: 'fp',
        body: '"ok"',
      });
      expect(await store.claim({ id: held, fingerprint: 'fp', token: 'u', lockTtl: LOCK })).toEqual({
        state: 'in_progress',
        fingerprint: 'fp',
      });
    });
  });

  it('a completion the replica did not acknowledge fails, and the same completion sent again once it is back succeeds', async () => {
    const store = redisStore({ client: storeClient(), prefix: 'acked:', waitForReplicas: ACKS });
    const record = id();
    const input = { id: record, fingerprint: 'fp', token: 't', state: 'completed', body: '1', ttl: 60_000 } as const;
    await store.claim({ id: record, fingerprint: 'fp', token: 't', lockTtl: LOCK });
    await withReplicaStopped(() => expect(store.complete(input)).rejects.toThrow(/replica\(s\) acknowledged/));
    expect(await store.complete(input)).toBe('stored');
    expect(await onReplica.hgetall(store.keyOf(record))).toMatchObject({ s: 'c', b: '1' });
  });

  it('through the engine: nothing runs without the replica, even when failing open (503 store_unavailable); it runs once it is back', async () => {
    const store = redisStore({ client: storeClient(), prefix: 'acked:', waitForReplicas: ACKS });
    const engine = createIdempotencyEngine({ store, lockTtl: LOCK, storeTimeout: 1_000, onStoreError: 'fail-open' });
    const key = randomUUID();
    let runs = 0;
    const pay = () => engine.run({ key, name: 'pay', payload: { amount: 1 } }, async () => ++runs);
    await withReplicaStopped(() => expect(pay()).rejects.toMatchObject({ reason: 'store_unavailable' }));
    expect(runs).toBe(0);
    expect(await pay()).toEqual({ value: 1, replayed: false });
    expect(await pay()).toEqual({ value: 1, replayed: true });
    expect(runs).toBe(1);
  });

  it('sends one WAIT for the scripts of one turn of the event loop, and none without the option', async () => {
    const store = redisStore({ client: storeClient(), prefix: 'acked:', waitForReplicas: ACKS });
    const plain = redisStore({ client: storeClient(), prefix: 'acked:' });
    const claimAll = (s: typeof store) =>
      Promise.all(
        Array.from({ length: 10 }, () => s.claim({ id: id(), fingerprint: 'fp', token: 't', lockTtl: LOCK })),
      );
    await claimAll(store); // scripts loaded
    let before = await commandCalls(client);
    await claimAll(store);
    expect(delta(before, await commandCalls(client))).toMatchObject({ evalsha: 10, wait: 1 });
    before = await commandCalls(client);
    await claimAll(plain);
    const calls = delta(before, await commandCalls(client));
    expect(calls.evalsha).toBe(10);
    expect(calls.wait ?? 0).toBe(0);
  });

  it.each([
    [{ replicas: 0, timeout: 100 }, /waitForReplicas\.replicas must be a whole number of at least 1, got the number 0/],
    [
      { replicas: 1, timeout: 0 },
      /waitForReplicas\.timeout must be .* at least 1 \(WAIT's 0 would wait forever\), got the number 0/,
    ],
    [{ replicas: 1.5, timeout: 100 }, /replicas must be a whole number/],
    [{ replicas: 1 }, /timeout must be .* got undefined/],
    [null, /replicas must be a whole number of at least 1, got undefined/],
  ])('refuses waitForReplicas %j, saying what to pass', (acks, message) => {
    expect(() => redisStore({ client: storeClient(), waitForReplicas: acks as never })).toThrow(IdempotencyConfigError);
    expect(() => redisStore({ client: storeClient(), waitForReplicas: acks as never })).toThrow(message);
  });
});

/** `INFO errorstats` as { error prefix: count }. */
async function errorCounts(redis: Redis): Promise<Record<string, number>> {
  const info = await redis.info('errorstats');
  const counts: Record<string, number> = {};
  for (const match of info.matchAll(/^errorstat_([^:]+):count=(\d+)/gm)) counts[match[1]!] = Number(match[2]);
  return counts;
}

/**
 * An empty script cache (a new Redis, or a replica just promoted): every
 * EVALSHA of the first batch answers NOSCRIPT. Those calls go out again
 * together, in the next batch under its one WAIT, rather than each on its
 * own with a WAIT of its own: a WAIT holds its connection, so a hundred of
 * them are answered one replication round trip apart. The replica gets its
 * primary's stream 50 ms late, through a proxy, so each of those round
 * trips takes at least 50 ms.
 */
describe('waitForReplicas on a cold script cache (the replica 50 ms behind)', () => {
  const DELAY_MS = 50;
  let lagging: PrivateRedis;
  let laggingReplica: PrivateRedis;
  let proxy: TcpProxy;
  let io: Redis;
  let node: ReturnType<typeof createClient>;
  let probe: Redis;
  beforeAll(async () => {
    lagging = await startPrivateRedis(['--repl-diskless-sync-delay', '0']);
    proxy = await startTcpProxy({ targetPort: lagging.port, delayMs: DELAY_MS });
    laggingReplica = await startPrivateRedis(['--replicaof', '127.0.0.1', String(proxy.port)]);
    io = new Redis({ port: lagging.port });
    node = createClient({ url: `redis://127.0.0.1:${lagging.port}` });
    node.on('error', () => {});
    await node.connect();
    probe = new Redis({ port: lagging.port });
    // online: a replica still syncing acknowledges nothing, and every WAIT would run out its timeout
    for (let tries = 0; !(await probe.info('replication')).includes(',state=online'); tries++) {
      if (tries === 200) throw new Error('the lagging replica did not sync with its primary within 10 s');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }, 30_000);
  afterAll(async () => {
    io?.disconnect();
    await node?.close();
    probe?.disconnect();
    await Promise.all([laggingReplica?.stop(), proxy?.close(), lagging?.stop()]);
  });

  it.each([
    ['ioredis', () => io],
    ['node-redis', () => node],
  ] as const)(
    'on %s: 100 first executions at once all run, each call meets NOSCRIPT once at most, and at most 4 WAITs cover them all',
    async (library, storeClient) => {
      // WAIT's and the store's timeouts well above the replication delay: what fails here is a count, not a race
      const store = redisStore({
        client: storeClient(),
        prefix: 'cold:',
        waitForReplicas: { replicas: 1, timeout: 2_500 },
      });
      const engine = createIdempotencyEngine({ store, lockTtl: 10_000, storeTimeout: 3_000 });
      await probe.script('FLUSH');
      const [calls, errors] = await Promise.all([commandCalls(probe), errorCounts(probe)]);
      let runs = 0;
      const results = await Promise.allSettled(
        Array.from({ length: 100 }, () =>
          engine.run({ key: randomUUID(), name: 'pay', payload: { amount: 1 } }, async () => ++runs),
        ),
      );
      const sent = delta(calls, await commandCalls(probe));
      const noScript = ((await errorCounts(probe)).NOSCRIPT ?? 0) - (errors.NOSCRIPT ?? 0);
      const refused = results.filter((r) => r.status === 'rejected');
      console.log(
        `[cold script cache, ${library}] ${refused.length} of 100 refused; WAIT x${sent.wait ?? 0}, EVALSHA x${sent.evalsha ?? 0}, ` +
          `EVAL x${sent.eval ?? 0}, NOSCRIPT x${noScript}`,
      );
      expect(refused.map((r) => (r as PromiseRejectedResult).reason?.message)).toEqual([]);
      expect(runs).toBe(100);
      // 100 claims and 100 completions: each met the empty cache at most once
      expect(noScript).toBeLessThanOrEqual(200);
      // per script, a batch that met NOSCRIPT and the batch that ran it, with one WAIT each
      expect(sent.wait).toBeLessThanOrEqual(4);
    },
  );
});

describe('waitForReplicas on a Cluster', () => {
  let cluster: PrivateCluster;
  let clusterClient: Cluster;
  let nodeCluster: ReturnType<typeof createCluster>;
  beforeAll(async () => {
    cluster = await startPrivateCluster(3, 1);
    clusterClient = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })));
    nodeCluster = createCluster({ rootNodes: cluster.ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })) });
    nodeCluster.on('error', () => {});
    await nodeCluster.connect();
  }, 60_000);
  afterAll(async () => {
    clusterClient?.disconnect();
    await nodeCluster?.close();
    await cluster?.stop();
  });

  it("sends each write's WAIT to the master of the record's slot, and to no other node", async () => {
    // a long timeout: a loaded machine's replica can take more than ACKS' 300 ms, and this test counts, it does not time
    const store = redisStore({
      client: clusterClient,
      prefix: 'ca:',
      waitForReplicas: { replicas: 1, timeout: 3_000 },
    });
    await store.claim({ id: id(), fingerprint: 'fp', token: 't', lockTtl: LOCK }); // slots known
    const nodes = new Map(
      cluster.ports.map((port) => [`127.0.0.1:${port}`, new Redis({ port, host: '127.0.0.1' })] as const),
    );
    try {
      // the script in every node's cache: a first EVALSHA answered NOSCRIPT would be sent again, with its WAIT
      await Promise.all([...nodes.values()].map((node) => node.script('LOAD', CLAIM.source)));
      for (let i = 0; i < 6; i++) {
        const record = id();
        const owner = clusterClient.slots[keySlot(store.keyOf(record))]![0]!;
        const before = new Map(
          await Promise.all([...nodes].map(async ([n, c]) => [n, await commandCalls(c)] as const)),
        );
        expect(await store.claim({ id: record, fingerprint: 'fp', token: 't', lockTtl: LOCK })).toMatchObject({
          state: 'acquired',
        });
        for (const [name, node] of nodes) {
          const calls = delta(before.get(name)!, await commandCalls(node));
          if (name === owner) expect(calls).toMatchObject({ evalsha: 1, wait: 1 });
          else expect(calls.wait ?? 0).toBe(0);
        }
      }
    } finally {
      for (const node of nodes.values()) node.disconnect();
    }
  });

  it.each([
    ['ioredis', () => clusterClient],
    ['node-redis', () => nodeCluster],
  ] as const)(
    'on %s, after SCRIPT FLUSH on every node: claims at once meet NOSCRIPT once at most, and each master runs at most 2 WAITs (the batch that met it, the batch that ran them)',
    async (_library, storeClient) => {
      const store = redisStore({
        client: storeClient(),
        prefix: 'cold:',
        waitForReplicas: { replicas: 1, timeout: 3_000 },
      });
      await store.claim({ id: id(), fingerprint: 'fp', token: 't', lockTtl: LOCK }); // slots known
      const nodes = cluster.ports.map((port) => new Redis({ port, host: '127.0.0.1' }));
      try {
        await Promise.all(nodes.map((node) => node.script('FLUSH')));
        const before = await Promise.all(
          nodes.map(async (node) => [await commandCalls(node), await errorCounts(node)] as const),
        );
        const claims = await Promise.all(
          Array.from({ length: 60 }, () => store.claim({ id: id(), fingerprint: 'fp', token: 't', lockTtl: LOCK })),
        );
        expect(claims.every((claim) => claim.state === 'acquired')).toBe(true);
        let noScript = 0;
        for (const [i, node] of nodes.entries()) {
          const calls = delta(before[i]![0], await commandCalls(node));
          noScript += ((await errorCounts(node)).NOSCRIPT ?? 0) - (before[i]![1].NOSCRIPT ?? 0);
          expect(calls.wait ?? 0).toBeLessThanOrEqual(2);
        }
        expect(noScript).toBeLessThanOrEqual(60);
      } finally {
        for (const node of nodes) node.disconnect();
      }
    },
  );
});

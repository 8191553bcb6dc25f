/**
 * The Redis store on a real 3-master Redis Cluster this file starts on ports
 * of its own, through ioredis `Cluster`, behind two app instances: the seed
 * scenarios over HTTP, the concurrency test, and slots migrated (with their
 * keys, by `redis-cli --cluster reshard`) while load runs.
 * test/stores/cluster.test.ts runs the store contract on a cluster; this file does
 * not repeat it.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fingerprint, recordId } from '../../src/core.js';
import { type RedisStore, redisStore } from '../../src/redis.js';
import { amountOf, type PayApp, pay, startPayApp } from '../fixtures/pay-app.js';
import { sleep } from '../helpers/redis.js';
import { type PrivateCluster, startPrivateCluster } from '../helpers/redis-server.js';
import { conflictingResults, lostOutcomes, runLoad } from './helpers/load.js';

const run = promisify(execFile);
const LOCK_TTL = 1_500;

let cluster: PrivateCluster;
const clients: Cluster[] = [];
const apps: PayApp[] = [];
let store: RedisStore;

beforeAll(async () => {
  cluster = await startPrivateCluster(3);
  for (let i = 0; i < 2; i++) {
    const client = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })));
    client.on('error', () => {});
    await client.ping();
    clients.push(client);
    const instanceStore = redisStore({ client, prefix: 'cl:' });
    store ??= instanceStore;
    apps.push(await startPayApp({ store: instanceStore, lockTtl: LOCK_TTL }));
  }
}, 90_000);
afterAll(async () => {
  await Promise.all(apps.map((a) => a.close()));
  for (const c of clients) c.disconnect();
  await cluster?.stop();
});

const runsOf = (key: string) => apps.reduce((n, app) => n + app.runs(key), 0);

describe('seed scenarios through ioredis Cluster', () => {
  it('1. no key: 400, nothing runs', async () => {
    expect(await pay(apps[0]!.url, undefined, { amount: 1 })).toMatchObject({ status: 400, reason: 'key_missing' });
  });

  it('2 and 3. runs once and is stored; the same key on the other instance replays it', async () => {
    const key = randomUUID();
    const first = await pay(apps[0]!.url, key, { amount: 2 });
    expect(first).toMatchObject({ status: 200, replayed: false });
    expect(await pay(apps[1]!.url, key, { amount: 2 })).toMatchObject({
      status: 200,
      replayed: true,
      chargeId: first.chargeId,
    });
    expect(runsOf(key)).toBe(1);
  });

  it('4. another payload with the same key: 422', async () => {
    const key = randomUUID();
    await pay(apps[0]!.url, key, { amount: 4 });
    expect(await pay(apps[1]!.url, key, { amount: 5 })).toMatchObject({ status: 422, reason: 'payload_mismatch' });
    expect(runsOf(key)).toBe(1);
  });

  it('5. concurrent duplicate on the other instance: 409 while the first runs', async () => {
    const key = randomUUID();
    const first = pay(apps[0]!.url, key, { amount: 6, holdMs: 1_000 });
    await expect.poll(() => runsOf(key)).toBe(1);
    expect(await pay(apps[1]!.url, key, { amount: 6 })).toMatchObject({ status: 409, reason: 'in_progress' });
    expect((await first).status).toBe(200);
    expect(runsOf(key)).toBe(1);
  });

  it('6. a claim whose holder died expires after lockTtl, and the retry runs', async () => {
    const key = randomUUID();
    const claimed = await store.claim({
      id: recordId(undefined, 'pay', key),
      fingerprint: fingerprint('pay', { amount: 7 }),
      token: 'dead-holder',
      lockTtl: LOCK_TTL,
    });
    expect(claimed).toMatchObject({ state: 'acquired' });
    expect(await pay(apps[0]!.url, key, { amount: 7 })).toMatchObject({ status: 409 });
    await sleep(LOCK_TTL + 200);
    expect(await pay(apps[1]!.url, key, { amount: 7 })).toMatchObject({ status: 200, replayed: false });
    expect(runsOf(key)).toBe(1);
  });
});

describe('concurrency through ioredis Cluster', () => {
  /** `count` keys whose records fall on the masters in turn, from CLUSTER KEYSLOT and CLUSTER SLOTS. */
  async function keysOnEveryMaster(count: number): Promise<string[]> {
    const owners = await slotOwners(cluster.ports[0]!);
    const masters = [...new Set(owners.values())];
    const keys: string[] = [];
    while (keys.length < count) {
      const key = randomUUID();
      const slot = Number(await clients[0]!.cluster('KEYSLOT', `cl:{${recordId(undefined, 'pay', key)}}`));
      if (owners.get(slot) === masters[keys.length % masters.length]) keys.push(key);
    }
    return keys;
  }

  it('200 concurrent calls per key over two instances, 10 keys over the 3 masters: one execution each, one result, a record on every master', async () => {
    const keys = await keysOnEveryMaster(10);
    const statuses: Record<string, number> = {};
    for (const key of keys) {
      const answers = await Promise.all(
        Array.from({ length: 200 }, (_, i) => pay(apps[i % 2]!.url, key, { amount: amountOf(key), holdMs: 50 })),
      );
      // At most one ran. On a loaded machine every claim of a burst can outlast storeTimeout (500 ms
      // here), the winner's too: all 503, and nothing ran (the late winner's claim is given back). The
      // next call then runs it, once.
      expect(runsOf(key)).toBeLessThanOrEqual(1);
      const ok = answers.filter((a) => a.status === 200);
      if (runsOf(key) === 0) {
        expect(ok).toEqual([]);
        ok.push(await payUntilAnswered(key));
      }
      expect(runsOf(key)).toBe(1);
      expect(new Set(ok.map((a) => a.chargeId)).size).toBe(1);
      // Every other answer is a refusal that ran nothing: 409 while the first call runs, or 503 when the
      // store did not answer within storeTimeout (500 ms here), which a machine this loaded can cause.
      const refusals = answers.filter((a) => a.status !== 200);
      const unexpected = refusals.filter(
        (a) =>
          !(a.status === 409 && a.reason === 'in_progress') && !(a.status === 503 && a.reason === 'store_unavailable'),
      );
      expect(
        unexpected.map((a) => `${a.status} ${a.reason ?? a.message ?? ''} after ${Math.round(a.tookMs)} ms`),
      ).toEqual([]);
      for (const a of answers) statuses[a.status] = (statuses[a.status] ?? 0) + 1;
      expect(await clients[0]!.exists(`cl:{${recordId(undefined, 'pay', key)}}`)).toBe(1);
    }
    console.log(`[cluster concurrency] ${keys.length} keys x 200 calls: ${JSON.stringify(statuses)}`);
    const perMaster = await Promise.all(clients[0]!.nodes('master').map((node) => node.dbsize()));
    expect(perMaster.every((n) => n > 0)).toBe(true);
  });
});

/** Pays with `key` until answered 200: 409 while a claim given back late (or expiring) holds the key. */
async function payUntilAnswered(key: string) {
  const started = performance.now();
  for (;;) {
    const answer = await pay(apps[0]!.url, key, { amount: amountOf(key) });
    if (answer.status === 200 || performance.now() - started > LOCK_TTL + 5_000) return answer;
    await sleep(100);
  }
}

/** Slot ranges per node id, from CLUSTER SLOTS. */
async function slotOwners(port: number): Promise<Map<number, string>> {
  const probe = new Redis({ port });
  try {
    const ranges = await probe.cluster('SLOTS');
    const owners = new Map<number, string>();
    for (const [from, to, master] of ranges) for (let slot = from; slot <= to; slot++) owners.set(slot, master![2]);
    return owners;
  } finally {
    probe.disconnect();
  }
}

async function nodeId(port: number): Promise<string> {
  const probe = new Redis({ port });
  try {
    return String(await probe.cluster('MYID'));
  } finally {
    probe.disconnect();
  }
}

describe('slot migration during load', () => {
  it('resharding slots with live records while clients run: nothing lost, nothing run twice', async () => {
    const [p0, p1, p2] = cluster.ports as [number, number, number];
    const [id0, id1, id2] = await Promise.all([nodeId(p0), nodeId(p1), nodeId(p2)]);
    const before = await slotOwners(p0);

    // the load runs until two seconds after the migrations end, however long they take
    let migratedAt: number | undefined;
    const load = runLoad({
      targets: () => apps.map((a) => a.url),
      durationMs: 120_000,
      stop: () => migratedAt !== undefined && Date.now() > migratedAt + 2_000,
      concurrency: 12,
      holdMs: () => 10,
    });
    await sleep(2_000);
    const reshard = (from: string, to: string, slots: number) =>
      run(
        'redis-cli',
        [
          '--cluster',
          'reshard',
          `127.0.0.1:${p0}`,
          '--cluster-from',
          from,
          '--cluster-to',
          to,
          '--cluster-slots',
          String(slots),
          '--cluster-yes',
        ],
        {
          timeout: 60_000,
        },
      );
    await reshard(id0, id1, 1_500);
    await reshard(id1, id2, 1_500);
    migratedAt = Date.now();
    const result = await load;

    const after = await slotOwners(p0);
    const moved = [...after].filter(([slot, owner]) => before.get(slot) !== owner).map(([slot]) => slot);
    expect(moved.length).toBeGreaterThanOrEqual(1_500);
    // the migrated slots held records, moved with their keys while clients used them
    const probe = new Redis({ port: p0 });
    let recordsInMovedSlots = 0;
    try {
      const byKey = [...result.keys.keys()].map((key) => store.keyOf(recordId(undefined, 'pay', key)));
      const slots = await Promise.all(byKey.map((k) => probe.cluster('KEYSLOT', k) as Promise<number>));
      const movedSet = new Set(moved);
      recordsInMovedSlots = slots.filter((slot) => movedSet.has(slot)).length;
    } finally {
      probe.disconnect();
    }
    expect(recordsInMovedSlots).toBeGreaterThan(20);

    const records = [...result.keys.values()];
    expect(records.filter((r) => r.failed !== undefined)).toEqual([]);
    expect(conflictingResults(result)).toEqual([]);
    const doubles = records.filter((r) => runsOf(r.key) > 1).map((r) => r.key);
    expect(doubles).toEqual([]);
    expect(await lostOutcomes(result, () => apps[Math.floor(Math.random() * 2)]!.url)).toEqual([]);
    console.info(
      `[cluster reshard] ${moved.length} slots moved with ${recordsInMovedSlots} of ${records.length} records, during ` +
        `${result.operations} operations (${result.duplicates} duplicates), ${result.requests} requests ${JSON.stringify(result.byStatus)}: ` +
        `0 double executions, 0 lost outcomes`,
    );
  });
});

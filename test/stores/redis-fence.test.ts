/**
 * The Redis store's restart fence (`restartFence`): once Redis has lost its
 * data, a claim of a key it does not hold is refused for one lockTtl, while
 * the renewals, steps and completions of the operations that were running
 * recreate their records. On a single node that really restarts empty, and
 * on a 3-master Cluster, where each master keeps the markers of its own slots
 * (the loss of one master's data is its slots' records and markers deleted).
 */
import { randomUUID } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { recordId } from '../../src/core/record-id.js';
import { createIdempotencyEngine } from '../../src/index.js';
import { type RedisStore, redisStore } from '../../src/redis.js';
import { connectionOf } from '../../src/stores/redis/client.js';
import { fenceMarkers, keySlot } from '../../src/stores/redis/fence.js';
import { type ControlledRedis, startControlledRedis } from '../helpers/redis-process.js';
import { type PrivateCluster, startPrivateCluster } from '../helpers/redis-server.js';

const LOCK = 800;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Setup {
  client: Redis | Cluster;
  markers: number;
  /** Redis loses the records of `ids` (the Cluster: and the markers of their slots; a restart loses everything). */
  forget(store: RedisStore, prefix: string, ids: string[]): Promise<void>;
}

let single: ControlledRedis | undefined;
let cluster: PrivateCluster | undefined;
const clients: (Redis | Cluster)[] = [];

beforeAll(async () => {
  [single, cluster] = await Promise.all([startControlledRedis({ persist: false }), startPrivateCluster(3)]);
}, 60_000);
afterAll(async () => {
  for (const c of clients) c.disconnect();
  await Promise.all([single?.destroy(), cluster?.stop()]);
});

const setups: [string, () => Setup][] = [
  [
    'a single node restarted empty',
    () => {
      const client = new Redis(single!.url, { maxRetriesPerRequest: 20 });
      client.on('error', () => {});
      clients.push(client);
      return {
        client,
        markers: 1,
        async forget() {
          await single!.kill();
          await single!.start();
        },
      };
    },
  ],
  [
    'a Cluster master that lost its data',
    () => {
      const client = new Cluster(cluster!.ports.map((port) => ({ host: '127.0.0.1', port })));
      clients.push(client);
      return {
        client,
        markers: 16_384,
        async forget(store, prefix, ids) {
          // what the master of each id's slot held is gone (the other masters keep theirs)
          const markers = fenceMarkers(connectionOf(client)!, prefix);
          for (const id of ids) {
            const key = store.keyOf(id);
            await client.del(key, `${key}:steps`, markers.of(key));
          }
        },
      };
    },
  ],
];

describe.each(setups)('the restart fence on %s', (_label, makeSetup) => {
  let setup: Setup;
  let fenced: RedisStore;
  let prefix: string;
  const id = () => `:fence:${randomUUID()}`;
  const forget = (ids: string[], store = fenced, storePrefix = prefix) => setup.forget(store, storePrefix, ids);
  const claim = (store: RedisStore, recordId: string, token: string) =>
    store.claim({ id: recordId, fingerprint: 'fp', token, lockTtl: LOCK });

  beforeAll(async () => {
    setup = makeSetup();
    prefix = `fence-${randomUUID().slice(0, 8)}:`;
    fenced = redisStore({ client: setup.client, prefix, restartFence: true });
  });
  // A restart of the single node raised the fence for every key: each test starts once it is down.
  beforeEach(async () => {
    await fenced.initialize();
    await expect
      .poll(
        () =>
          claim(fenced, id(), 'probe').then(
            ({ state }) => state,
            () => 'refused',
          ),
        { timeout: 5 * LOCK },
      )
      .toBe('acquired');
  });

  it('initialize() writes every missing marker once', async () => {
    const store = redisStore({ client: setup.client, prefix: `init-${randomUUID().slice(0, 8)}:`, restartFence: true });
    expect(await store.initialize()).toEqual({ written: setup.markers });
    expect(await store.initialize()).toEqual({ written: 0 });
    expect(await claim(store, id(), 'a')).toMatchObject({ state: 'acquired' });
  });

  it("refuses the claim of a key Redis forgot for one lockTtl, taking nothing; the holder's renewal recreates its claim and its completion is replayed", async () => {
    const held = id();
    expect(await claim(fenced, held, 'holder')).toMatchObject({ state: 'acquired' });
    await forget([held]);

    await expect(claim(fenced, held, 'retry')).rejects.toThrow(/lost its data.*refused for \d+ ms more/);
    expect(await setup.client.hgetall(fenced.keyOf(held))).toEqual({});

    expect(await fenced.extend({ id: held, token: 'holder', lockTtl: LOCK, fingerprint: 'fp' })).toBe(true);
    expect(await setup.client.hgetall(fenced.keyOf(held))).toEqual({
      s: 'p',
      f: 'fp',
      t: 'holder',
      c: expect.stringMatching(/^\d{13}$/),
      l: String(LOCK),
    });
    expect(await claim(fenced, held, 'retry')).toEqual({ state: 'in_progress', fingerprint: 'fp' });
    expect(
      await fenced.complete({
        id: held,
        fingerprint: 'fp',
        token: 'holder',
        state: 'completed',
        body: '"paid"',
        ttl: 60_000,
      }),
    ).toBe('stored');
    expect(await claim(fenced, held, 'retry')).toEqual({ state: 'completed', fingerprint: 'fp', body: '"paid"' });
  });

  it('takes absent keys again once the window (the claim’s lockTtl from the first script that saw the loss) is over; a renewal after it finds its claim lost, as without the fence', async () => {
    const held = id();
    expect(await claim(fenced, held, 'holder')).toMatchObject({ state: 'acquired' });
    await forget([held]);
    await expect(claim(fenced, held, 'retry')).rejects.toThrow(/lost its data/);
    await sleep(LOCK + 100); // real time: Redis times the fence's window (lockTtl) by its own clock
    expect(await fenced.extend({ id: held, token: 'holder', lockTtl: LOCK, fingerprint: 'fp' })).toBe(false);
    expect(await setup.client.exists(fenced.keyOf(held))).toBe(0);
    expect(await claim(fenced, held, 'retry')).toMatchObject({ state: 'acquired' });
  });

  it('a completion that finds the record and the marker gone stores its outcome and raises the fence', async () => {
    const held = id();
    const fresh = id();
    expect(await claim(fenced, held, 'holder')).toMatchObject({ state: 'acquired' });
    await forget([held, fresh]);
    expect(
      await fenced.complete({
        id: held,
        fingerprint: 'fp',
        token: 'holder',
        state: 'completed',
        body: '1',
        ttl: 60_000,
      }),
    ).toBe('stored');
    await expect(claim(fenced, fresh, 'a')).rejects.toThrow(/lost its data/);
    expect(await claim(fenced, held, 'retry')).toEqual({ state: 'completed', fingerprint: 'fp', body: '1' });
  });

  it('a step saved on a forgotten record recreates the claim; a step whose predecessors were lost is not recorded, and the run goes on', async () => {
    const first = id();
    const later = id();
    const save = (recordId: string, index: number) =>
      fenced.saveStep!({
        id: recordId,
        token: 'holder',
        fingerprint: 'fp',
        index,
        name: `s${index}`,
        body: String(index),
        ttl: 60_000,
        lockTtl: LOCK,
      });
    expect(await claim(fenced, first, 'holder')).toMatchObject({ state: 'acquired' });
    expect(await claim(fenced, later, 'holder')).toMatchObject({ state: 'acquired' });
    expect(await save(later, 0)).toBe('stored');
    await forget([first, later]);

    expect(await save(first, 0)).toBe('stored');
    expect(await setup.client.hgetall(fenced.keyOf(first))).toEqual({
      s: 'p',
      f: 'fp',
      t: 'holder',
      c: expect.stringMatching(/^\d{13}$/),
      l: String(LOCK),
    });
    expect(await setup.client.hgetall(`${fenced.keyOf(first)}:steps`)).toEqual({ f: 'fp', n: '1', k0: 's0', b0: '0' });

    expect(await save(later, 1)).toBe('stored'); // step 0 was lost: step 1 has no place to go
    expect(await setup.client.hgetall(fenced.keyOf(later))).toEqual({
      s: 'p',
      f: 'fp',
      t: 'holder',
      c: expect.stringMatching(/^\d{13}$/),
      l: String(LOCK),
    });
    expect(await setup.client.exists(`${fenced.keyOf(later)}:steps`)).toBe(0);
  });

  it('without initialize(), the first claims of a new Redis wait one lockTtl, and the error says what to run', async () => {
    const store = redisStore({ client: setup.client, prefix: `new-${randomUUID().slice(0, 8)}:`, restartFence: true });
    const key = id();
    await expect(claim(store, key, 'a')).rejects.toThrow(/If this Redis is new, run store\.initialize\(\) once/);
    await sleep(LOCK + 100); // real time: Redis times the fence's window (lockTtl) by its own clock
    expect(await claim(store, key, 'a')).toMatchObject({ state: 'acquired' });
  });

  it('with the fence off, the store reads and writes no marker: a forgotten key is taken at once', async () => {
    const openPrefix = `open-${randomUUID().slice(0, 8)}:`;
    const open = redisStore({ client: setup.client, prefix: openPrefix });
    const held = id();
    expect(await claim(open, held, 'holder')).toMatchObject({ state: 'acquired' });
    await forget([held], open, openPrefix);
    expect(await claim(open, held, 'retry')).toMatchObject({ state: 'acquired' });
    await forget([held], open, openPrefix);
    expect(await open.extend({ id: held, token: 'holder', lockTtl: LOCK, fingerprint: 'fp' })).toBe(false);
    expect(await setup.client.exists(fenceMarkers(connectionOf(setup.client)!, openPrefix).of(open.keyOf(held)))).toBe(
      0,
    );
  });

  it('through the engine: a refused claim answers store_unavailable and runs nothing, even when failing open', async () => {
    const key = randomUUID();
    const engine = createIdempotencyEngine({
      store: fenced,
      lockTtl: LOCK,
      storeTimeout: 250,
      onStoreError: 'fail-open',
    });
    let runs = 0;
    const pay = () => engine.run({ key, name: 'pay', payload: { amount: 1 } }, async () => ++runs);
    await forget([recordId(undefined, 'pay', key)]);
    await expect(pay()).rejects.toMatchObject({ reason: 'store_unavailable' });
    expect(runs).toBe(0);
    await sleep(LOCK + 100); // real time: Redis times the fence's window (lockTtl) by its own clock
    expect(await pay()).toEqual({ value: 1, replayed: false });
  });
});

describe('the fence markers of a Cluster', () => {
  it('keySlot is the slot Redis gives a key (CLUSTER KEYSLOT), hash tags included', async () => {
    const client = new Redis({ port: cluster!.ports[0]! });
    clients.push(client);
    const keys = [
      ...Array.from({ length: 300 }, () => randomUUID()),
      'idem:{a:b:c}',
      'x{}y',
      '{}{a}',
      'a{b}{c}',
      '{',
      '}{',
      'é{ü}',
      '',
    ];
    for (const key of keys) expect(keySlot(key), key).toBe(await client.cluster('KEYSLOT', key));
  });
});

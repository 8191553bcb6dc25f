/**
 * The Redis store through Sentinel: a primary with 2 replicas and 3 Sentinels
 * on private ports (test/helpers/redis-topology.ts), reached by an ioredis
 * Sentinel client and by a node-redis Sentinel client (`createSentinel`),
 * plain, and ioredis's with `waitForReplicas` (node-redis's spreads commands
 * over a pool of connections, so a WAIT could count another connection's
 * writes: the store refuses that pairing). The shared store contract runs on
 * each; then the primary is killed, and each client serves a stored outcome
 * and a new key from the promoted replica.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIdempotencyEngine } from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import { describeStoreContract } from '../contract/store-contract.js';
import {
  connectSentinelClients,
  type SentinelClients,
  type SentinelSet,
  startSentinelSet,
} from '../helpers/redis-topology.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let set: SentinelSet;
let connected: SentinelClients | undefined;
let clients: SentinelClients['clients'];

beforeAll(async () => {
  set = await startSentinelSet({ delayMs: 0 });
  connected = await connectSentinelClients(set);
  clients = connected.clients;
}, 60_000);
afterAll(async () => {
  await connected?.close();
  await set?.stop();
});

const made: { close(): Promise<void> }[] = [];
afterAll(async () => {
  await Promise.all(made.map((store) => store.close().catch(() => {})));
});

for (const library of ['ioredis', 'node-redis'] as const) {
  // node-redis's Sentinel client spreads commands over a pool: waitForReplicas is refused there (below)
  for (const durable of library === 'ioredis' ? [false, true] : [false]) {
    const label = `${library} Sentinel client${durable ? ', waitForReplicas' : ''}`;
    describeStoreContract(
      label,
      () => {
        const store = redisStore({
          client: clients[library],
          prefix: `sentinel-${library}-${durable}:`,
          ...(durable ? { waitForReplicas: { replicas: 1, timeout: 3_000 } } : {}),
        });
        made.push(store);
        return { store, advance: async (ms: number) => void (await sleep(ms)) };
      },
      { notifies: true },
    );
  }
}

it("refuses waitForReplicas on node-redis's Sentinel client, and says which client to use", () => {
  expect(() => redisStore({ client: clients['node-redis'], waitForReplicas: { replicas: 1, timeout: 500 } })).toThrow(
    /node-redis's Sentinel client sends commands over a pool of connections\. Use ioredis's Sentinel client/,
  );
});

describe('after a failover', () => {
  it('each Sentinel client replays a stored outcome and runs a new key on the promoted replica', async () => {
    const engines = (['ioredis', 'node-redis'] as const).map((library) => {
      const store = redisStore({
        client: clients[library],
        prefix: `failover-${library}:`,
        ...(library === 'ioredis' ? { waitForReplicas: { replicas: 1, timeout: 1_000 } } : {}),
      });
      made.push(store);
      return createIdempotencyEngine({ store, lockTtl: 5_000, storeTimeout: 1_500 });
    });
    const key = randomUUID();
    const first = await Promise.all(
      engines.map((engine) => engine.run({ key, name: 'pay', payload: {} }, async () => 1)),
    );
    expect(first).toEqual([
      { value: 1, replayed: false },
      { value: 1, replayed: false },
    ]);

    await set.killPrimary();
    await set.waitForFailover();
    for (const engine of engines) {
      const retry = async <T>(fn: () => Promise<T>): Promise<T> => {
        for (let i = 0; ; i++) {
          try {
            return await fn();
          } catch (error) {
            if (i === 100) throw error; // 503s while the client finds the new primary
            await sleep(100);
          }
        }
      };
      expect(await retry(() => engine.run({ key, name: 'pay', payload: {} }, async () => 2))).toEqual({
        value: 1,
        replayed: true,
      });
      expect(await retry(() => engine.run({ key: randomUUID(), name: 'pay', payload: {} }, async () => 3))).toEqual({
        value: 3,
        replayed: false,
      });
    }
    // the Sentinels may first wait out TILT mode (30 s), entered when the machine stalls or its wall clock steps
  }, 120_000);
});

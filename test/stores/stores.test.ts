import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { hashRecordId } from '../../src/core/events.js';
import { scopeOfRecordId } from '../../src/core/record-id.js';
import { createIdempotencyEngine, type IdempotencyEvent, recordId, retryable } from '../../src/core.js';
import { type MemoryStore, memoryStore } from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import { describeStoreContract } from '../contract/store-contract.js';
import { claimWithSteps } from '../helpers/records.js';
import { REDIS_URL, sleep } from '../helpers/redis.js';
import { liveStores } from '../helpers/stores.js';

describeStoreContract('memory', () => {
  let time = 1_700_000_000_000;
  const store = memoryStore({ now: () => time });
  return {
    store,
    advance: async (ms) => {
      time += ms;
    },
  };
});

// The Redis store on a plain client, and on one with enableAutoPipelining (the commands of one tick sent together).
const { stores, redis, prefix } = liveStores('contract', [
  'redis',
  'redis, autopipelining',
  'redis, restart fence',
  'redis, replicas acknowledged',
  'redis, node-redis',
  'redis, node-redis, restart fence',
  'redis, node-redis, replicas acknowledged',
]);
for (const { name, make, notifies } of stores)
  describeStoreContract(name, () => ({ store: make(), advance: sleep }), { notifies });

describe('redis store specifics', () => {
  it('reloads its scripts after SCRIPT FLUSH (a restart or failover empties the cache)', async () => {
    const store = redisStore({ client: redis, prefix });
    await redis.script('FLUSH');
    const id = `:flush:${Date.now()}`;
    expect(await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 1_000 })).toMatchObject({
      state: 'acquired',
    });
    await redis.script('FLUSH');
    expect(
      await store.complete({ fingerprint: 'fp', id, token: 't', state: 'completed', body: 'b', ttl: 10_000 }),
    ).toBe('stored');
    // the claim's time `c` and its lease `l` stay once finished (no command spent deleting `l`)
    expect(await redis.hgetall(store.keyOf(id))).toEqual({
      s: 'c',
      f: 'fp',
      b: 'b',
      t: 't',
      c: expect.stringMatching(/^\d{13}$/),
      l: '1000',
    });
  });

  it('keeps one hash per record under a hash tag, with the claim TTL and then the outcome TTL', async () => {
    const store = redisStore({ client: redis, prefix });
    const id = `u1:pay:${Date.now()}`;
    expect(store.keyOf(id)).toBe(`${prefix}{${id}}`);
    const claim = await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 5_000 });
    const claimTtl = await redis.pttl(store.keyOf(id));
    expect(claimTtl).toBeGreaterThan(4_000);
    expect(claimTtl).toBeLessThanOrEqual(5_000);
    // the claim's time (Redis's clock, as the claim answered it) and its lockTtl, for operators
    const claimedAt = String(claim.time);
    expect(await redis.hgetall(store.keyOf(id))).toEqual({ s: 'p', f: 'fp', t: 't', c: claimedAt, l: '5000' });
    expect(await store.extend({ id, token: 't', lockTtl: 7_000, fingerprint: 'fp' })).toBe(true);
    expect(await redis.hgetall(store.keyOf(id))).toEqual({ s: 'p', f: 'fp', t: 't', c: claimedAt, l: '7000' });
    await store.complete({ fingerprint: 'fp', id, token: 't', state: 'completed', body: '{}', ttl: 86_400_000 });
    expect(await redis.pttl(store.keyOf(id))).toBeGreaterThan(86_000_000);
    expect(await redis.hgetall(store.keyOf(id))).toEqual({ s: 'c', f: 'fp', b: '{}', t: 't', c: claimedAt, l: '7000' });
  });

  it('refuses a client that is neither ioredis nor node-redis, and a prefix with braces', () => {
    expect(() => redisStore({ client: {} as never })).toThrow(
      /must be an ioredis Redis or Cluster, or a node-redis client, cluster or Sentinel \(createClient, createCluster, createSentinel\), got/,
    );
    expect(() => redisStore({ client: redis, prefix: 'a{b}' })).toThrow(/without braces/);
  });
});

describe('redis store with a client keyPrefix', () => {
  it('still notifies waiters (the notice names the key without the client prefix)', async () => {
    const prefixed = new Redis(REDIS_URL, { keyPrefix: 'app:' });
    const store = redisStore({ client: prefixed, prefix });
    try {
      const id = `:prefixed:${Date.now()}`;
      await store.claim({ id, fingerprint: 'fp', token: 'a', lockTtl: 5_000 });
      await store.claim({ id, fingerprint: 'fp', token: 'w', lockTtl: 5_000, waiting: true });
      let notified = false;
      const off = await store.onSettled!(id, () => (notified = true));
      expect(await redis.exists(`app:${store.keyOf(id)}`)).toBe(1);
      await store.complete({ fingerprint: 'fp', id, token: 'a', state: 'completed', body: 'x', ttl: 10_000 });
      await expect.poll(() => notified, { timeout: 2_000 }).toBe(true);
      off();
      await redis.del(`app:${store.keyOf(id)}`);
    } finally {
      await store.close();
      prefixed.disconnect();
    }
  });
});

describe('memory store bounds', () => {
  const LONG = 3_600_000;
  /** A finished record: claimed, then completed with `body`. */
  const finish = async (store: MemoryStore, id: string, body = 'ok', ttl = LONG) => {
    expect(await store.claim({ id, fingerprint: 'fp', token: id, lockTtl: LONG })).toMatchObject({ state: 'acquired' });
    expect(await store.complete({ id, fingerprint: 'fp', token: id, state: 'completed', body, ttl })).toBe('stored');
  };
  const replayed = async (store: MemoryStore, id: string) =>
    (await store.claim({ id, fingerprint: 'fp', token: randomUUID(), lockTtl: 1 })).state === 'completed';
  const evictionsOf = (store: MemoryStore) => {
    const ids: string[] = [];
    store.onEvicted!((id) => ids.push(id));
    return ids;
  };

  it('a tenant cannot evict another: 1,000 fresh keys of one scope evict only that scope (maxEntries 1,000)', async () => {
    const store = memoryStore({ maxEntries: 1_000 });
    const evicted = evictionsOf(store);
    const victim = recordId('victim', 'pay', 'k1');
    await finish(store, victim, '{"chargeId":"ch_1"}');
    for (let i = 0; i < 1_500; i++) await finish(store, recordId('attacker', 'pay', `k${i}`));
    // the victim's retry is a replay of the first charge, not a second one
    expect(await store.claim({ id: victim, fingerprint: 'fp', token: 'retry', lockTtl: 1 })).toMatchObject({
      state: 'completed',
      body: '{"chargeId":"ch_1"}',
    });
    expect(store.size).toBe(1_000);
    expect(evicted).toHaveLength(501);
    expect(evicted.every((id) => scopeOfRecordId(id) === 'attacker')).toBe(true);
    // the attacker lost its own oldest records, oldest first
    expect(evicted.slice(0, 2)).toEqual([recordId('attacker', 'pay', 'k0'), recordId('attacker', 'pay', 'k1')]);
    store.close();
  });

  it('room is taken from the scope with the largest share, by entries or by bytes, oldest first', async () => {
    const store = memoryStore({ maxEntries: 10, maxBytes: 100_000 });
    const evicted = evictionsOf(store);
    for (let i = 0; i < 6; i++) await finish(store, recordId('many', 'op', `k${i}`)); // 6 of 10 entries
    await finish(store, recordId('big', 'op', 'k0'), 'x'.repeat(70_000)); // about 70% of the bytes
    for (let i = 0; i < 3; i++) await finish(store, recordId('small', 'op', `k${i}`));
    expect(store.size).toBe(10);
    // small (3 entries) needs an entry: `big` holds the largest share (its bytes), and loses its only record
    await finish(store, recordId('small', 'op', 'k3'));
    expect(evicted).toEqual([recordId('big', 'op', 'k0')]);
    // then `many` (6 entries) is the largest, and gives its oldest record
    await finish(store, recordId('small', 'op', 'k4'));
    expect(evicted.at(-1)).toBe(recordId('many', 'op', 'k0'));
    store.close();
  });

  it('a scope evicts as many of its own oldest records as the room it needs takes', async () => {
    const store = memoryStore({ maxBytes: 1_000_000 });
    const evicted = evictionsOf(store);
    await finish(store, recordId('other', 'op', 'k'), 'small');
    for (let i = 0; i < 4; i++) await finish(store, recordId('a', 'op', `k${i}`), 'x'.repeat(200_000));
    await finish(store, recordId('a', 'op', 'k4'), 'x'.repeat(500_000));
    expect(evicted).toEqual([recordId('a', 'op', 'k0'), recordId('a', 'op', 'k1')]);
    expect(store.bytes).toBeLessThanOrEqual(1_000_000);
    store.close();
  });

  it('a byte budget: 1 MB outcomes stay within maxBytes, and every completion is stored', async () => {
    const maxBytes = 8 * 1024 * 1024;
    const store = memoryStore({ maxBytes });
    const body = (i: number) => `${i}`.padEnd(1_000_000, '.');
    for (let i = 0; i < 200; i++) {
      await finish(store, recordId(`tenant-${i % 3}`, 'export', `k${i}`), body(i));
      expect(store.bytes).toBeLessThanOrEqual(maxBytes);
    }
    // about 8 outcomes fit; every tenant keeps its newest ones
    expect(store.size).toBeGreaterThanOrEqual(6);
    expect(store.size).toBeLessThanOrEqual(8);
    for (const i of [197, 198, 199])
      expect(await replayed(store, recordId(`tenant-${i % 3}`, 'export', `k${i}`))).toBe(true);
    store.close();
  });

  it('a completion is never refused for room: beyond maxBytes by at most the outcomes of the claims running; the next claim makes room', async () => {
    const maxBytes = 1_000_000;
    const store = memoryStore({ maxBytes });
    await finish(store, recordId('other', 'op', 'k'), 'small');
    const ids = Array.from({ length: 3 }, (_, i) => recordId('big', 'op', `k${i}`));
    for (const id of ids) await store.claim({ id, fingerprint: 'fp', token: id, lockTtl: LONG });
    const outcome = 'x'.repeat(1_200_000); // larger than the whole budget
    for (const id of ids) {
      const stored = await store.complete({
        id,
        fingerprint: 'fp',
        token: id,
        state: 'completed',
        body: outcome,
        ttl: LONG,
      });
      expect(stored).toBe('stored');
      expect(store.bytes).toBeGreaterThan(maxBytes);
      expect(store.bytes).toBeLessThanOrEqual(maxBytes + outcome.length);
    }
    expect(await replayed(store, ids[2]!)).toBe(true);
    // `big` evicted its own older outcomes to store each next one; `other`, with a smaller share, kept its record
    expect(await replayed(store, recordId('other', 'op', 'k'))).toBe(true);
    // the next claim, of any scope, needs room within maxBytes: the largest scope's outcome goes
    await store.claim({ id: recordId('other', 'op', 'k2'), fingerprint: 'fp', token: 't', lockTtl: LONG });
    expect(store.bytes).toBeLessThanOrEqual(maxBytes);
    expect(await replayed(store, recordId('other', 'op', 'k'))).toBe(true);
    store.close();
  });

  it('never evicts a running claim; a store full of them refuses a new claim, saying what is full and what to change', async () => {
    const store = memoryStore({ maxEntries: 2 });
    await store.claim({ id: ':op:a', fingerprint: 'fp', token: 'a', lockTtl: 60_000 });
    await store.claim({ id: ':op:b', fingerprint: 'fp', token: 'b', lockTtl: 60_000 });
    await expect(store.claim({ id: ':op:c', fingerprint: 'fp', token: 'c', lockTtl: 60_000 })).rejects.toThrow(
      /memoryStore is full: 2 of 2 entries, .*running claims.*Raise maxEntries/,
    );
    expect(await store.claim({ id: ':op:a', fingerprint: 'fp', token: 'x', lockTtl: 1 })).toMatchObject({
      state: 'in_progress',
    });
    store.close();
    // the same by bytes: two claims with 30,000-character fingerprints fill 64 KiB
    const small = memoryStore({ maxBytes: 65_536 });
    const fingerprint = 'f'.repeat(30_000);
    await small.claim({ id: ':op:a', fingerprint, token: 'a', lockTtl: 60_000 });
    await small.claim({ id: ':op:b', fingerprint, token: 'b', lockTtl: 60_000 });
    await expect(small.claim({ id: ':op:c', fingerprint, token: 'c', lockTtl: 60_000 })).rejects.toThrow(
      /memoryStore is full: \d+ bytes of 65536, and the claim needs \d+, .*Raise maxBytes/,
    );
    small.close();
  });

  it('a scope that fills the store with running claims cannot evict the finished records of another; its new claim is refused', async () => {
    const store = memoryStore({ maxEntries: 10 });
    const evicted = evictionsOf(store);
    for (let i = 0; i < 3; i++) await finish(store, recordId('victim', 'pay', `k${i}`));
    for (let i = 0; i < 7; i++) {
      const id = recordId('attacker', 'pay', `k${i}`);
      await store.claim({ id, fingerprint: 'fp', token: id, lockTtl: LONG });
    }
    await expect(
      store.claim({ id: recordId('attacker', 'pay', 'k7'), fingerprint: 'fp', token: 't', lockTtl: LONG }),
    ).rejects.toThrow(/memoryStore is full: 10 of 10 entries.*Raise maxEntries/);
    expect(evicted).toEqual([]);
    for (let i = 0; i < 3; i++) expect(await replayed(store, recordId('victim', 'pay', `k${i}`))).toBe(true);
    // the victim itself still makes room, from its own oldest record
    await finish(store, recordId('victim', 'pay', 'k3'));
    expect(evicted).toEqual([recordId('victim', 'pay', 'k0')]);
    store.close();
  });

  it('running claims of one scope do not make a third scope evict another: the newcomer is refused instead', async () => {
    const store = memoryStore({ maxEntries: 10 });
    const evicted = evictionsOf(store);
    // the hog holds the largest share, all of it running claims; the victim holds finished records
    for (let i = 0; i < 7; i++) {
      const id = recordId('hog', 'pay', `k${i}`);
      await store.claim({ id, fingerprint: 'fp', token: id, lockTtl: LONG });
    }
    for (let i = 0; i < 3; i++) await finish(store, recordId('victim', 'pay', `k${i}`));
    await expect(
      store.claim({ id: recordId('newcomer', 'pay', 'k0'), fingerprint: 'fp', token: 't', lockTtl: LONG }),
    ).rejects.toThrow(/memoryStore is full/);
    expect(evicted).toEqual([]);
    for (let i = 0; i < 3; i++) expect(await replayed(store, recordId('victim', 'pay', `k${i}`))).toBe(true);
    store.close();
  });

  it('expired records go first, before any finished record is evicted', async () => {
    let time = 0;
    const store = memoryStore({ maxEntries: 3, now: () => time });
    const evicted = evictionsOf(store);
    await finish(store, recordId('a', 'op', 'old'), 'ok', LONG);
    await finish(store, recordId('b', 'op', 'short'), 'ok', 1_000);
    await finish(store, recordId('a', 'op', 'young'), 'ok', LONG);
    time += 1_001;
    await finish(store, recordId('a', 'op', 'new'));
    expect(evicted).toEqual([]);
    expect(await replayed(store, recordId('a', 'op', 'old'))).toBe(true);
    expect(store.size).toBe(3);
    store.close();
  });

  it('counts recorded steps in the same budget and scope as records, and frees them with clearSteps or expiry', async () => {
    let time = 1_700_000_000_000;
    const store = memoryStore({ maxEntries: 4, now: () => time });
    const evicted = evictionsOf(store);
    const id = recordId('steps', 'op', 'k');
    await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: LONG });
    const before = store.bytes;
    const save = (index: number, ttl = 1_000) =>
      store.saveStep!({
        id,
        token: 't',
        fingerprint: 'fp',
        index,
        name: `s${index}`,
        body: 'y'.repeat(1_000),
        ttl,
        lockTtl: LONG,
      });
    expect(await save(0)).toBe('stored');
    expect(store.size).toBe(2); // the claim, and its steps
    expect(store.bytes).toBeGreaterThan(before + 1_000);
    const oneStep = store.bytes;
    expect(await save(1)).toBe('stored');
    expect(store.bytes).toBeGreaterThan(oneStep + 1_000);
    // released: the claim goes, its steps stay for the retry, and count for its scope
    await store.release({ id, token: 't' });
    expect(store.size).toBe(1);
    await finish(store, recordId('other', 'op', 'k0'));
    await finish(store, recordId('other', 'op', 'k1'));
    await finish(store, recordId('other', 'op', 'k2'));
    await finish(store, recordId('other', 'op', 'k3')); // full: `other` (3 entries) gives its own oldest
    expect(evicted).toEqual([recordId('other', 'op', 'k0')]);
    time += 1_001; // the steps expire
    expect(store.size).toBe(3);
    // cleared with the outcome
    const next = recordId('steps', 'op', 'k2');
    await claimWithSteps(store, next, { token: 'n', lockTtl: LONG, ttl: LONG });
    expect(store.size).toBe(4); // room for the steps: `other` gave its oldest record again
    expect(evicted).toEqual([recordId('other', 'op', 'k0'), recordId('other', 'op', 'k1')]);
    await store.complete({
      id: next,
      fingerprint: 'fp',
      token: 'n',
      state: 'completed',
      body: 'b',
      ttl: LONG,
      clearSteps: true,
    });
    expect(store.size).toBe(3);
    store.close();
  });

  /** Each eviction as [id, what]: `outcome` for a finished record, `steps` for the steps a released claim left. */
  const evictionKindsOf = (store: MemoryStore) => {
    const seen: [string, string | undefined][] = [];
    store.onEvicted!((id, what) => seen.push([id, what]));
    return seen;
  };
  /** Claims `id`, records one step of `body`, and gives the claim back (a 5xx, or `retryable()`). */
  const releaseWithStep = async (store: MemoryStore, id: string, body = 'y') => {
    expect(await store.claim({ id, fingerprint: 'fp', token: id, lockTtl: LONG })).toMatchObject({ state: 'acquired' });
    const step = { id, token: id, fingerprint: 'fp', index: 0, name: 'reserve', body, ttl: LONG, lockTtl: LONG };
    expect(await store.saveStep!(step)).toBe('stored');
    expect(await store.release({ id, token: id })).toBe(true);
  };
  const stepsOf = async (store: MemoryStore, id: string) => {
    const answer = await store.claim({ id, fingerprint: 'fp', token: randomUUID(), lockTtl: LONG });
    expect(answer.state).toBe('acquired');
    return answer.state === 'acquired' ? (answer.steps?.steps.map((step) => step.name) ?? []) : [];
  };

  it('steps a released claim left count in its scope: one tenant releasing claims with a step each cannot lock out a new tenant, nor make another retry run again (engine)', async () => {
    const time = 1_700_000_000_000;
    const now = () => time;
    const store = memoryStore({ maxEntries: 100, now });
    const events: IdempotencyEvent[] = [];
    const engine = createIdempotencyEngine({ store, now, onEvent: (event) => events.push(event) });
    const runs = new Map<string, number>();
    const pay = (scope: string, key: string) =>
      engine.run({ key, name: 'pay', scope, payload: key }, async () => {
        runs.set(`${scope}/${key}`, (runs.get(`${scope}/${key}`) ?? 0) + 1);
        return `charged ${key}`;
      });
    expect(await pay('tenant-b', 'b1')).toEqual({ value: 'charged b1', replayed: false });
    // docs/steps.md's own pattern: a step, then `throw retryable(...)` for a declined card; 150 fresh keys
    let reserved = 0;
    const order = (i: number, declined: boolean) =>
      engine.run({ key: `a${i}`, name: 'order', scope: 'tenant-a', payload: i }, async ({ step }) => {
        await step('reserve', async () => ({ reservation: ++reserved }));
        if (declined) throw retryable(new Error('declined'));
        return 'ordered';
      });
    for (let i = 0; i < 150; i++) await expect(order(i, true)).rejects.toThrow('declined');
    expect(reserved).toBe(150); // every attacker request ran: its own oldest steps made room
    expect(store.size).toBeLessThanOrEqual(100);
    // a tenant with nothing stored pays; the other tenant's new payment evicts none of its own, and its retry replays
    expect(await pay('tenant-c', 'c1')).toEqual({ value: 'charged c1', replayed: false });
    expect(await pay('tenant-b', 'b2')).toEqual({ value: 'charged b2', replayed: false });
    expect(await pay('tenant-b', 'b1')).toEqual({ value: 'charged b1', replayed: true });
    expect(runs.get('tenant-b/b1')).toBe(1);
    // only the attacker's steps went, oldest first, each an `evicted` event that says it was steps
    const evicted = events.filter((event) => event.result === 'evicted');
    expect(evicted.length).toBeGreaterThan(50);
    expect(evicted.every((event) => event.name === 'order' && event.reason === 'steps')).toBe(true);
    expect(evicted[0]!.keyHash).toBe(hashRecordId(recordId('tenant-a', 'order', 'a0')));
    // a retry whose steps were evicted runs them again (the cost of an eviction); one whose steps are kept resumes
    await expect(order(0, false)).resolves.toEqual({ value: 'ordered', replayed: false });
    expect(reserved).toBe(151);
    await expect(order(149, false)).resolves.toEqual({ value: 'ordered', replayed: false });
    expect(reserved).toBe(151);
    store.close();
  });

  it('steps of a held claim are never evicted; those a released claim left go with its scope finished records, oldest first', async () => {
    const store = memoryStore({ maxEntries: 5 });
    const evicted = evictionKindsOf(store);
    const held = recordId('a', 'op', 'held');
    await store.claim({ id: held, fingerprint: 'fp', token: 'h', lockTtl: LONG });
    const step = { id: held, token: 'h', fingerprint: 'fp', index: 0, name: 'held-step', body: '1', ttl: LONG };
    expect(await store.saveStep!({ ...step, lockTtl: LONG })).toBe('stored');
    await finish(store, recordId('a', 'op', 'r1'));
    await releaseWithStep(store, recordId('a', 'op', 's2'));
    await finish(store, recordId('a', 'op', 'r3'));
    expect(store.size).toBe(5); // a: the held claim, its steps, r1, the steps of s2, r3
    for (let i = 0; i < 4; i++) await finish(store, recordId('c', 'op', `k${i}`));
    expect(evicted).toEqual([
      [recordId('a', 'op', 'r1'), 'outcome'],
      [recordId('a', 'op', 's2'), 'steps'],
      [recordId('a', 'op', 'r3'), 'outcome'],
      // `a` now holds only its running claim and the steps of it: `c` gives its own oldest
      [recordId('c', 'op', 'k0'), 'outcome'],
    ]);
    // the evicted steps are gone (a retry runs them again); the held ones are there for the holder's next claim
    expect(await stepsOf(store, recordId('a', 'op', 's2'))).toEqual([]);
    expect(await store.release({ id: held, token: 'h' })).toBe(true);
    expect(await stepsOf(store, held)).toEqual(['held-step']);
    store.close();
  });

  it('a retry of a released claim never evicts its own steps: refused when nothing else may go, which leaves them evictable by others', async () => {
    // by bytes, `a` holds the largest share: the steps of one released claim, with a body of 50,000 characters
    const store = memoryStore({ maxEntries: 3, maxBytes: 65_536 });
    const evicted = evictionKindsOf(store);
    const retried = recordId('a', 'op', 'k');
    await releaseWithStep(store, retried, 'x'.repeat(50_000));
    for (const key of ['x', 'y']) {
      const id = recordId('b', 'op', key);
      await store.claim({ id, fingerprint: 'fp', token: id, lockTtl: LONG });
    }
    // full: the retry's scope would hold more than any other with it, and only its own steps could go
    await expect(store.claim({ id: retried, fingerprint: 'fp', token: 'retry', lockTtl: LONG })).rejects.toThrow(
      /memoryStore is full: 3 of 3 entries/,
    );
    expect(evicted).toEqual([]);
    // another scope's claim takes them: `a` still holds the largest share
    const newcomer = recordId('c', 'op', 'k');
    expect(await store.claim({ id: newcomer, fingerprint: 'fp', token: 'c', lockTtl: LONG })).toMatchObject({
      state: 'acquired',
    });
    expect(evicted).toEqual([[retried, 'steps']]);
    store.close();
  });

  it('a retry of a released claim with room to make takes it from others, and resumes after its steps', async () => {
    const store = memoryStore({ maxEntries: 3 });
    const evicted = evictionKindsOf(store);
    const retried = recordId('a', 'op', 'k');
    await releaseWithStep(store, retried); // the oldest thing of `a`
    await finish(store, recordId('a', 'op', 'r1'));
    await finish(store, recordId('a', 'op', 'r2'));
    expect(await stepsOf(store, retried)).toEqual(['reserve']);
    expect(evicted).toEqual([[recordId('a', 'op', 'r1'), 'outcome']]);
    store.close();
  });

  it('steps an expired claim left are evictable once the claim is swept', async () => {
    let time = 1_700_000_000_000;
    const store = memoryStore({ maxEntries: 2, now: () => time });
    const evicted = evictionKindsOf(store);
    const lost = recordId('a', 'op', 'k');
    await store.claim({ id: lost, fingerprint: 'fp', token: 'lost', lockTtl: 1_000 });
    const step = { id: lost, token: 'lost', fingerprint: 'fp', index: 0, name: 's', body: 'x'.repeat(40_000) };
    expect(await store.saveStep!({ ...step, ttl: LONG, lockTtl: 1_000 })).toBe('stored');
    time += 1_001; // the claim expires: its holder is gone
    await store.claim({ id: recordId('c', 'op', 'k0'), fingerprint: 'fp', token: 'c0', lockTtl: LONG });
    expect(evicted).toEqual([]); // the expired claim made room
    await store.claim({ id: recordId('d', 'op', 'k0'), fingerprint: 'fp', token: 'd0', lockTtl: LONG });
    expect(evicted).toEqual([[lost, 'steps']]); // `a` holds the largest share, by bytes
    expect(store.size).toBe(2);
    store.close();
  });

  it('size and bytes: live entries and their counted bytes, both back to 0 once everything expires', async () => {
    let time = 0;
    const store = memoryStore({ now: () => time });
    expect([store.size, store.bytes]).toEqual([0, 0]);
    const id = recordId('s', 'op', 'k');
    await store.claim({ id, fingerprint: 'fp', token: 'tok', lockTtl: 1_000 });
    const claimed = store.bytes;
    // the characters of its id, fingerprint and token, and a fixed overhead
    expect(claimed).toBeGreaterThan(id.length + 'fp'.length + 'tok'.length);
    await store.complete({
      id,
      fingerprint: 'fp',
      token: 'tok',
      state: 'completed',
      body: 'z'.repeat(500),
      ttl: 2_000,
    });
    expect(store.bytes).toBe(claimed + 500);
    expect(store.size).toBe(1);
    time += 2_000;
    expect([store.size, store.bytes]).toEqual([0, 0]);
    store.close();
  });

  it('refuses a maxBytes that is not a whole number of bytes large enough for records', () => {
    expect(() => memoryStore({ maxBytes: 0 })).toThrow(
      /maxBytes must be a whole number of bytes >= 65536, got the number 0\./,
    );
    expect(() => memoryStore({ maxBytes: 1.5e6 + 0.5 })).toThrow(/maxBytes/);
    expect(() => memoryStore({ maxEntries: 0 })).toThrow(/maxEntries must be a whole number >= 1, got the number 0\./);
  });
});

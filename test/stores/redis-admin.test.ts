/**
 * The Redis store's operator API beyond the contract (test/contract/admin-contract.ts):
 * its layout (a client keyPrefix, escaped and glob characters in ids, records of an
 * older version without `c`/`l`, steps keys and fence markers never listed), a
 * Cluster's listing over every master, and what each call costs in commands.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ListInput, type RecordSummary, recordId, type StoreAdmin } from '../../src/core.js';
import { type RedisStore, redisStore } from '../../src/redis.js';
import { globEscape } from '../../src/stores/redis/admin.js';
import { claimWithSteps } from '../helpers/records.js';
import { deleteByPrefix, REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { commandCalls, delta, type PrivateRedis, startPrivateRedis } from '../helpers/redis-server.js';
import { liveStores } from '../helpers/stores.js';

const live = liveStores('redis-admin', ['redis cluster', 'redis cluster, node-redis']);
const { redis } = live;

/** Every page of a listing. */
async function listAll(admin: StoreAdmin, input: ListInput) {
  const records: RecordSummary[] = [];
  const cursors: string[] = [];
  let cursor: string | undefined;
  let examined = 0;
  do {
    const page = await admin.list({ ...input, cursor });
    records.push(...page.records);
    examined += page.examined;
    cursor = page.cursor;
    if (cursor !== undefined) cursors.push(cursor);
    expect(cursors.length).toBeLessThan(10_000);
  } while (cursor !== undefined);
  return { records, cursors, examined, ids: records.map((r) => r.id).sort() };
}

const procedure = () => `adm.op${randomUUID().slice(0, 8)}`;

describe('redis admin: layout', () => {
  const prefix = uniquePrefix('redis-admin');
  const prefixed = new Redis(REDIS_URL, { keyPrefix: 'app:' });
  afterAll(async () => {
    await deleteByPrefix(redis, prefix);
    await deleteByPrefix(redis, `app:${prefix}`);
    prefixed.disconnect();
  });

  it('glob-escapes what SCAN must match literally', () => {
    expect(globEscape('a*b?c[d]e\\f')).toBe('a\\*b\\?c\\[d\\]e\\\\f');
  });

  it('a client with a keyPrefix: lists, inspects and forgets its own records, not those written without it', async () => {
    const store = redisStore({ client: prefixed, prefix });
    const plain = redisStore({ client: redis, prefix });
    const name = procedure();
    const mine = [recordId('u1', name, 'a'), recordId('u1', name, 'b')];
    for (const id of mine) await store.claim({ id, fingerprint: 'fp', token: `t-${id}`, lockTtl: 10_000 });
    const other = recordId('u1', name, 'unprefixed');
    await plain.claim({ id: other, fingerprint: 'fp', token: 'x', lockTtl: 10_000 });
    expect(await redis.exists(`app:${store.keyOf(mine[0]!)}`)).toBe(1);

    expect((await listAll(store.admin, { name, limit: 5 })).ids).toEqual([...mine].sort());
    expect((await listAll(plain.admin, { name, limit: 5 })).ids).toEqual([other]);
    expect(await store.admin.inspect({ id: mine[0]! })).toMatchObject({ state: 'in_progress', lockTtl: 10_000 });
    expect(await store.admin.forget({ id: mine[0]!, state: 'in_progress', token: `t-${mine[0]}` })).toBe(true);
    expect(await redis.exists(`app:${store.keyOf(mine[0]!)}`)).toBe(0);
    expect((await listAll(store.admin, { name })).ids).toEqual([mine[1]]);
  });

  it('ids with escaped and glob characters: a name is matched literally, never as a pattern', async () => {
    const store = redisStore({ client: redis, prefix });
    const base = procedure();
    // ':' '{' '}' '%' are escaped in an id; '*' '?' '[' ']' '\' are not, and are glob characters in MATCH
    const tricky = `${base}:{x}%*?[ab]\\`;
    const lookalikes = [`${base}:{x}%a?[ab]\\`, `${base}:{x}%*?a\\`, `${base}`, `${base}:{x}%*?[ab]\\\\`];
    const ids = [
      recordId('sc*pe', tricky, 'k?1'),
      recordId(undefined, tricky, '[k]2'),
      recordId('', tricky, 'k:{3}'),
      recordId('u\\', tricky, '*'),
    ];
    for (const id of ids) await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 10_000 });
    for (const name of lookalikes)
      await store.claim({ id: recordId('u', name, 'k'), fingerprint: 'fp', token: 't', lockTtl: 10_000 });

    expect((await listAll(store.admin, { name: tricky, limit: 3 })).ids).toEqual([...ids].sort());
    for (const name of lookalikes)
      expect((await listAll(store.admin, { name })).ids).toEqual([recordId('u', name, 'k')]);
    for (const id of ids) {
      expect(await store.admin.inspect({ id })).toMatchObject({ id, state: 'in_progress', token: 't' });
      expect(await store.admin.forget({ id, state: 'in_progress', token: 't' })).toBe(true);
    }
    expect((await listAll(store.admin, { name: tricky })).ids).toEqual([]);
  });

  it('a record of an older version (no claim time, no lockTtl): shown without them, and listed by olderThan', async () => {
    const store = redisStore({ client: redis, prefix });
    const name = procedure();
    const held = recordId('u1', name, 'old-held');
    const done = recordId('u1', name, 'old-done');
    await redis.hset(store.keyOf(held), { s: 'p', f: 'fp', t: 'old' });
    await redis.pexpire(store.keyOf(held), 10_000);
    await redis.hset(store.keyOf(done), { s: 'c', f: 'fp', t: 'old', b: '"é"' });
    await redis.pexpire(store.keyOf(done), 60_000);

    const info = await store.admin.inspect({ id: held });
    expect(info).toMatchObject({ state: 'in_progress', token: 'old', fingerprint: 'fp', waiting: false });
    expect(info.claimedAt).toBeUndefined();
    expect(info.lockTtl).toBeUndefined();
    expect(info.expiresAt).toBeGreaterThan(info.time + 9_000);
    expect(await store.admin.inspect({ id: done, body: true })).toMatchObject({
      state: 'completed',
      bytes: 4,
      body: '"é"',
    });
    const stuck = await listAll(store.admin, { name, state: 'in_progress', olderThan: 3_600_000 });
    expect(stuck.ids).toEqual([held]);
    expect(await store.admin.forget({ id: done, state: 'completed', token: 'old' })).toBe(true);
  });

  it('a record whose expiry was removed (PERSIST) shows no expiresAt', async () => {
    const store = redisStore({ client: redis, prefix });
    const id = recordId('u1', procedure(), 'persisted');
    await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 10_000 });
    await redis.persist(store.keyOf(id));
    const info = await store.admin.inspect({ id });
    expect(info.state).toBe('in_progress');
    expect(info.expiresAt).toBeUndefined();
    await redis.del(store.keyOf(id));
  });

  it('never lists steps keys, fence markers or keys that are not records; reads and forgets leave the marker alone', async () => {
    const fencedPrefix = `${prefix}fenced:`;
    const store = redisStore({ client: redis, prefix: fencedPrefix, restartFence: true });
    await store.initialize();
    const name = procedure();
    const id = recordId('u1', name, 'stepped');
    await claimWithSteps(store, id);
    // a key under the pattern that is not a record's hash: skipped, not an error
    const stray = `${fencedPrefix}{u1:${name}:stray}`;
    await redis.set(stray, 'not a record', 'PX', 60_000);
    const all = await listAll(store.admin, {});
    expect(all.ids).toEqual([id]);
    // the stray key matched the pattern and was read: not a record, so not examined
    expect(all.examined).toBe(1);

    // the marker lost (a flush): the operator's calls do not raise the fence
    await redis.del(`${fencedPrefix}fence`);
    expect((await store.admin.inspect({ id })).steps).toEqual([{ name: 's', bytes: 1 }]);
    await listAll(store.admin, { state: 'in_progress' });
    expect(await store.admin.forget({ id, state: 'in_progress', token: 'a', steps: true })).toBe(true);
    expect(await store.admin.forget({ id, state: 'absent', steps: true })).toBe(false);
    expect(await redis.exists(`${fencedPrefix}fence`)).toBe(0);
    await redis.del(stray);
  });

  it('forget tells a waiting request at once, and a completed record can be forgotten with its token only', async () => {
    const store = redisStore({ client: redis, prefix });
    const id = recordId('u1', procedure(), 'waited');
    await store.claim({ id, fingerprint: 'fp', token: 'holder', lockTtl: 10_000 });
    await store.claim({ id, fingerprint: 'fp', token: 'waiter', lockTtl: 10_000, waiting: true });
    expect((await store.admin.inspect({ id })).waiting).toBe(true);
    let told = 0;
    const off = await store.onSettled!(id, () => told++);
    expect(await store.admin.forget({ id, state: 'in_progress', token: 'holder' })).toBe(true);
    await expect.poll(() => told, { timeout: 2_000 }).toBe(1);
    off();
    await store.close();
  });

  it('refuses a cursor it did not give', async () => {
    const store = redisStore({ client: redis, prefix });
    await expect(store.admin.list({ cursor: 'nope' })).rejects.toThrow(/not a cursor/);
    await expect(store.admin.list({ cursor: '0:12' })).rejects.toThrow(/not a cursor/);
  });
});

describe('redis admin: what each call costs', () => {
  let server: PrivateRedis;
  let client: Redis;
  let stats: Redis;
  beforeAll(async () => {
    server = await startPrivateRedis();
    client = new Redis({ port: server.port });
    stats = new Redis({ port: server.port });
  });
  afterAll(async () => {
    client.disconnect();
    stats.disconnect();
    await server.stop();
  });
  const measure = async (action: () => Promise<unknown>) => {
    const before = await commandCalls(stats);
    await action();
    const all = delta(before, await commandCalls(stats));
    delete all.info;
    return all;
  };

  it('inspect and forget: one script each; a page: one SCAN (COUNT = limit), TIME, one script per key in one write', async () => {
    const store = redisStore({ client });
    const name = procedure();
    const ids = Array.from({ length: 20 }, (_, i) => recordId('u', name, `k${i}`));
    for (const id of ids) await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 10_000 });
    // load the scripts once
    await store.admin.inspect({ id: ids[0]! });
    await store.admin.list({ limit: 1_000 });
    await store.admin.forget({ id: 'none', state: 'absent' });

    const inspect = await measure(() => store.admin.inspect({ id: ids[0]! }));
    expect(inspect.evalsha).toBe(1);
    expect(
      Object.keys(inspect).filter((c) => !['evalsha', 'time', 'hmget', 'pttl', 'hstrlen', 'hget'].includes(c)),
    ).toEqual([]);

    const page = await measure(async () => {
      const { records, cursor } = await store.admin.list({ limit: 1_000 });
      expect(records).toHaveLength(20);
      expect(cursor).toBeUndefined();
    });
    expect(page).toMatchObject({ scan: 1, evalsha: 20 });
    expect(page.keys).toBeUndefined();

    const forget = await measure(() => store.admin.forget({ id: ids[1]!, state: 'in_progress', token: 't' }));
    expect(forget).toMatchObject({ evalsha: 1, hmget: 1, del: 1, publish: 1 });
  });
});

describe('redis admin on a Cluster: a listing walks every master', () => {
  const cases: { kind: 'redis cluster' | 'redis cluster, node-redis'; make: () => RedisStore }[] = [
    {
      kind: 'redis cluster',
      make: () => redisStore({ client: live.cluster(), prefix: `many${randomUUID().slice(0, 4)}:` }),
    },
    { kind: 'redis cluster, node-redis', make: () => live.store('redis cluster, node-redis') as RedisStore },
  ];
  it.each(cases)('$kind: 300 records over 3 masters, pages of 7, each record once', async ({ make }) => {
    const store = make();
    const name = procedure();
    const ids = Array.from({ length: 300 }, (_, i) => recordId(`u${i % 7}`, name, `k${i}`));
    await Promise.all(ids.map((id) => store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 30_000 })));
    const other = recordId('u', procedure(), 'elsewhere');
    await store.claim({ id: other, fingerprint: 'fp', token: 't', lockTtl: 30_000 });

    const byName = await listAll(store.admin, { name, limit: 7 });
    expect(byName.ids).toEqual([...ids].sort());
    expect(byName.records).toHaveLength(300); // none twice
    // the cursor names the master it is on: 0, 1 and 2 in turn
    const masters = new Set(byName.cursors.map((c) => c.split(':')[0]));
    expect([...masters].sort()).toEqual(['0', '1', '2']);

    const all = await listAll(store.admin, { limit: 50 });
    expect(new Set(all.ids)).toEqual(new Set([...ids, other]));
    // the records SCAN answered, every one of them listed (no filter): 301, more if Redis resized a table meanwhile
    expect(all.examined).toBe(all.records.length);

    const info = await store.admin.inspect({ id: ids[5]! });
    expect(info).toMatchObject({ state: 'in_progress', lockTtl: 30_000, steps: [] });
    await Promise.all(ids.map((id) => store.admin.forget({ id, state: 'in_progress', token: 't' })));
    expect((await listAll(store.admin, { name, limit: 100 })).ids).toEqual([]);
  });
});

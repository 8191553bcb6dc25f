/**
 * What each path costs in Redis commands, read from INFO commandstats of a
 * Redis server of this test's own (the shared one sees other test files).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIdempotencyEngine } from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import { commandCalls, delta, type PrivateRedis, startPrivateRedis } from '../helpers/redis-server.js';
import { gate } from '../helpers/trpc.js';

let server: PrivateRedis;
let client: Redis;
let admin: Redis;

beforeAll(async () => {
  server = await startPrivateRedis();
  client = new Redis({ port: server.port });
  admin = new Redis({ port: server.port });
});
afterAll(async () => {
  client.disconnect();
  admin.disconnect();
  await server.stop();
});

/** The commands sent by the store (scripts count once; what they call inside is listed apart). */
async function measure(action: () => Promise<unknown>) {
  const before = await commandCalls(admin);
  await action();
  const all = delta(before, await commandCalls(admin));
  delete all.info; // the measurement's own
  const sent = (all.evalsha ?? 0) + (all.eval ?? 0);
  return { sent, all };
}

describe('Redis commands per request', () => {
  it('first execution: 2 (claim, complete); replay: 1; in-flight rejection: 1', async () => {
    const engine = createIdempotencyEngine({ store: redisStore({ client }) });
    const input = { key: randomUUID(), name: 'pay', payload: { amount: 1 } };
    await engine.run({ key: 'warm-up', name: 'pay', payload: {} }, async () => 0); // loads the scripts once

    const first = await measure(() => engine.run(input, async () => ({ ok: true })));
    const replay = await measure(() => engine.run(input, async () => ({ ok: true })));

    const running = gate();
    const held = { key: randomUUID(), name: 'pay', payload: { amount: 2 } };
    const holder = engine.run(held, () => running.opened.then(() => 1));
    await expect.poll(() => client.exists(`idem:{:pay:${held.key}}`)).toBe(1);
    let refusal: unknown;
    const rejection = await measure(() => engine.run(held, async () => 2).catch((e) => (refusal = e)));
    expect(refusal).toMatchObject({ reason: 'in_progress' });
    running.open();
    await holder;

    expect(first.sent).toBe(2);
    // TIME: a claim that takes the record checks its deadline by Redis's clock;
    // HGETALL: it reads the steps recorded under the key, inside the same script.
    expect(first.all).toEqual({ evalsha: 2, time: 1, hmget: 2, hset: 2, pexpire: 2, hgetall: 1 });
    expect(replay.sent).toBe(1);
    expect(replay.all).toEqual({ evalsha: 1, hmget: 1 });
    expect(rejection.sent).toBe(1);
    expect(rejection.all).toMatchObject({ evalsha: 1, hmget: 1 });
  });

  it('a completion that a request waited for removes the waiter flag and publishes once', async () => {
    const store = redisStore({ client });
    const id = `:waited:${randomUUID()}`;
    await store.claim({ id, fingerprint: 'fp', token: 'holder', lockTtl: 5_000 });
    await store.claim({ id, fingerprint: 'fp', token: 'waiter', lockTtl: 5_000, waiting: true });
    expect(await client.hget(store.keyOf(id), 'w')).toBe('1');
    const completion = await measure(() =>
      store.complete({ id, fingerprint: 'fp', token: 'holder', state: 'completed', body: 'b', ttl: 10_000 }),
    );
    expect(completion.all).toEqual({ evalsha: 1, hmget: 1, hdel: 1, hset: 1, pexpire: 1, publish: 1 });
    expect(await client.hgetall(store.keyOf(id))).toEqual({
      s: 'c',
      f: 'fp',
      b: 'b',
      t: 'holder',
      c: expect.stringMatching(/^\d{13}$/),
      l: '5000',
    });
  });

  it('a step costs one script call; an operation that uses none costs nothing more', async () => {
    const engine = createIdempotencyEngine({ store: redisStore({ client }) });
    await engine.run({ key: 'warm-up-steps', name: 'pay', payload: {} }, ({ step }) => step('a', () => 0));
    const twoSteps = await measure(() =>
      engine.run({ key: randomUUID(), name: 'pay', payload: {} }, async ({ step }) => {
        await step('reserve', () => 1);
        await step('charge', () => 2);
        return 3;
      }),
    );
    // claim, two steps, complete (which deletes the steps)
    expect(twoSteps.sent).toBe(4);
    expect(twoSteps.all.del).toBe(1);
  });
});

/** How many times Redis read from a client socket (INFO stats): one write read at once counts once. */
async function readsProcessed(redis: Redis): Promise<number> {
  const match = /^total_reads_processed:(\d+)/m.exec(await redis.info('stats'));
  if (match === null) throw new Error('INFO stats has no total_reads_processed (Redis 6 or later has it)');
  return Number(match[1]);
}

describe('Redis store: the scripts called in one turn of the event loop', () => {
  const claimOf = (id: string) => ({ id, fingerprint: 'fp', token: randomUUID(), lockTtl: 5_000 });

  it('reach Redis in one write, as separate commands with a reply each', async () => {
    const store = redisStore({ client });
    await store.claim(claimOf(`:warm-up:${randomUUID()}`)); // loads the script once
    const ids = Array.from({ length: 20 }, () => `:batch:${randomUUID()}`);
    const readsBefore = await readsProcessed(admin);
    const commands = await measure(async () => {
      const results = await Promise.all(ids.map((id) => store.claim(claimOf(id))));
      expect(results.map((r) => r.state)).toEqual(ids.map(() => 'acquired'));
    });
    // the two INFO commandstats of measure, this INFO, and the 20 scripts: one read
    expect((await readsProcessed(admin)) - readsBefore).toBe(4);
    expect(commands.all).toMatchObject({ evalsha: 20, hmget: 20 });
    for (const id of ids) expect(await client.hget(store.keyOf(id), 's')).toBe('p');
  });

  it('fail one by one: an error reply fails its own call, and the others of the write succeed', async () => {
    const store = redisStore({ client });
    const ids = Array.from({ length: 6 }, () => `:batch-error:${randomUUID()}`);
    await client.set(store.keyOf(ids[2]!), 'not a record'); // HMGET on it: WRONGTYPE
    const results = await Promise.allSettled(ids.map((id) => store.claim(claimOf(id))));
    expect(results[2]).toMatchObject({ status: 'rejected', reason: { name: 'ReplyError' } });
    expect((results[2] as PromiseRejectedResult).reason.message).toMatch(/^WRONGTYPE/);
    for (const i of [0, 1, 3, 4, 5])
      expect(results[i]).toMatchObject({ status: 'fulfilled', value: { state: 'acquired' } });
  });

  it('are sent from no request’s context, not from that of the request that came first', async () => {
    // A tracer files a command under the context it is issued in; the write carries every request's scripts.
    const request = new AsyncLocalStorage<string>();
    const traced = new Redis({ port: server.port });
    try {
      const store = redisStore({ client: traced });
      await store.claim(claimOf(`:warm-up:${randomUUID()}`)); // the script is loaded: no NOSCRIPT fallback below
      const sentFrom: { command: string; context: string | undefined }[] = [];
      for (const command of ['pipeline', 'evalsha'] as const) {
        const send = traced[command].bind(traced) as (...args: unknown[]) => unknown;
        (traced as unknown as Record<string, unknown>)[command] = (...args: unknown[]) => {
          sentFrom.push({ command, context: request.getStore() });
          return send(...args);
        };
      }
      const claims = ['A', 'B', 'C'].map((name) =>
        request.run(name, () => store.claim(claimOf(`:context:${name}:${randomUUID()}`))),
      );
      expect((await Promise.all(claims)).map((r) => r.state)).toEqual(['acquired', 'acquired', 'acquired']);
      const alone = await request.run('D', () => store.claim(claimOf(`:context:D:${randomUUID()}`)));
      expect(alone.state).toBe('acquired');
      expect(sentFrom).toEqual([
        { command: 'pipeline', context: undefined },
        { command: 'evalsha', context: undefined },
      ]);
    } finally {
      traced.disconnect();
    }
  });

  it('after SCRIPT FLUSH, go again together in the next write, the script once as source (EVAL)', async () => {
    const store = redisStore({ client });
    await admin.script('FLUSH');
    const ids = Array.from({ length: 5 }, () => `:batch-flush:${randomUUID()}`);
    const commands = await measure(async () => {
      const results = await Promise.all(ids.map((id) => store.claim(claimOf(id))));
      expect(results.map((r) => r.state)).toEqual(ids.map(() => 'acquired'));
    });
    // 5 EVALSHA answered NOSCRIPT; then 1 EVAL, which loads the script, and 4 EVALSHA
    expect(commands.all).toMatchObject({ eval: 1, evalsha: 9 });
  });
});

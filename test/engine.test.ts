/**
 * The engine on its own, as a queue consumer or webhook handler would use it.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { createIdempotencyEngine, type IdempotencyEvent, memoryStore } from '../src/index.js';
import { redisStore } from '../src/redis.js';
import { gate } from './helpers/trpc.js';
import { Redis } from 'ioredis';
import { startTcpProxy } from './helpers/proxy.js';
import { connectRedis, deleteByPrefix, REDIS_URL, sleep, uniquePrefix } from './helpers/redis.js';

const redis = connectRedis();
const prefix = uniquePrefix('engine');
afterAll(async () => {
  await deleteByPrefix(redis, prefix);
  redis.disconnect();
});

describe('engine outside tRPC', () => {
  it('runs a queue message once per message id and replays the outcome to a redelivery', async () => {
    const engine = createIdempotencyEngine({ store: redisStore({ client: redis, prefix }) });
    const handled: string[] = [];
    const message = { id: randomUUID(), body: { orderId: 'o-1', total: 4200 } };
    const consume = () =>
      engine.run({ key: message.id, name: 'orders.paid', payload: message.body }, async () => {
        handled.push(message.body.orderId);
        return { shipped: true, at: '2026-11-30' };
      });
    const first = await consume();
    const redelivered = await consume();
    expect(first).toEqual({ value: { shipped: true, at: '2026-11-30' }, replayed: false });
    expect(redelivered).toEqual({ value: { shipped: true, at: '2026-11-30' }, replayed: true });
    expect(handled).toEqual(['o-1']);
  });

  it('releases the key when the handler throws, so a redelivery runs it again', async () => {
    const engine = createIdempotencyEngine({ store: memoryStore() });
    let attempts = 0;
    const handle = () =>
      engine.run({ key: 'evt_1', name: 'stripe.webhook', payload: { type: 'charge.succeeded' } }, async () => {
        attempts++;
        if (attempts === 1) throw new Error('downstream unavailable');
        return 'ok';
      });
    await expect(handle()).rejects.toThrow('downstream unavailable');
    await expect(handle()).resolves.toEqual({ value: 'ok', replayed: false });
    await expect(handle()).resolves.toEqual({ value: 'ok', replayed: true });
    expect(attempts).toBe(2);
  });

  it('fences a holder whose claim expired and was taken over: its late completion is dropped', async () => {
    let time = 1_000_000;
    const store = memoryStore({ now: () => time });
    const events: IdempotencyEvent[] = [];
    const engine = createIdempotencyEngine({ store, lockTtl: 30_000, onEvent: (e) => events.push(e) });
    const stalled = gate();
    const input = { key: 'k1', name: 'transfer', payload: { amount: 5 } };

    const a = engine.run(input, async () => {
      await stalled.opened; // a long GC pause or a frozen VM
      return 'from A';
    });
    await sleep(10);
    time += 31_000; // A's claim expires without renewal
    const b = await engine.run(input, async () => 'from B');
    expect(b).toEqual({ value: 'from B', replayed: false });
    stalled.open();
    expect(await a).toEqual({ value: 'from A', replayed: false });
    expect(await engine.run(input, async () => 'never')).toEqual({ value: 'from B', replayed: true });
    expect(events.filter((e) => e.result === 'lease_lost').map((e) => e.reason)).toEqual(['fenced']);
  });

  it('aborts the operation signal when renewal finds the claim gone', async () => {
    const events: IdempotencyEvent[] = [];
    const store = redisStore({ client: redis, prefix });
    const engine = createIdempotencyEngine({ store, lockTtl: 300, onEvent: (e) => events.push(e) });
    const key = randomUUID();
    let abortedAfterMs: number | undefined;
    const run = engine.run({ key, name: 'slow', payload: {} }, async ({ signal }) => {
      const started = Date.now();
      // Someone deletes the record (an operator, a restart of Redis): the claim is gone.
      await redis.del(store.keyOf(`:slow:${key}`));
      await new Promise<void>((resolve) => {
        signal.addEventListener('abort', () => resolve());
        setTimeout(resolve, 3_000).unref();
      });
      abortedAfterMs = signal.aborted ? Date.now() - started : undefined;
      return 'finished anyway';
    });
    await expect(run).resolves.toMatchObject({ value: 'finished anyway' });
    expect(abortedAfterMs).toBeDefined();
    expect(events.map((e) => e.result)).toContain('lease_lost');
  });

  it('never puts the raw key, the scope or the payload in events', async () => {
    const events: IdempotencyEvent[] = [];
    const engine = createIdempotencyEngine({ store: memoryStore(), onEvent: (e) => events.push(e) });
    const key = 'secret-key-7f3a';
    const input = { key, scope: 'user-4711', name: 'pay', payload: { card: '4242424242424242' } };
    await engine.run(input, async () => 'ok');
    await engine.run(input, async () => 'ok');
    await engine.run({ ...input, payload: { card: '5555' } }, async () => 'ok').catch(() => {});
    expect(events.map((e) => e.result)).toEqual(['acquired', 'completed', 'replayed', 'mismatch']);
    const text = JSON.stringify(events);
    for (const secret of [key, 'user-4711', '4242424242424242', '5555']) expect(text).not.toContain(secret);
    expect(new Set(events.map((e) => e.keyHash)).size).toBe(1);
    expect(events[0]!.keyHash).toMatch(/^[0-9a-f]{16}$/);
  });

  it('an observer that throws changes nothing', async () => {
    const engine = createIdempotencyEngine({
      store: memoryStore(),
      onEvent: () => {
        throw new Error('broken logger');
      },
    });
    await expect(engine.run({ key: 'k', name: 'op', payload: 1 }, async () => 2)).resolves.toEqual({ value: 2, replayed: false });
  });
});

describe('a slow store', () => {
  it('gives back a claim that lands after the store timeout, instead of blocking the key for lockTtl', async () => {
    const proxy = await startTcpProxy({ targetPort: Number(new URL(REDIS_URL).port || 6379), targetHost: new URL(REDIS_URL).hostname });
    const slowClient = new Redis({ port: proxy.port });
    await slowClient.ping();
    proxy.setDelay(400);
    const store = redisStore({ client: slowClient, prefix });
    const engine = createIdempotencyEngine({ store, storeTimeout: 100, lockTtl: 30_000 });
    const key = randomUUID();
    let ran = false;
    await expect(engine.run({ key, name: 'op', payload: 1 }, async () => (ran = true))).rejects.toMatchObject({ reason: 'store_unavailable' });
    expect(ran).toBe(false);
    // the claim reached Redis at once; its answer comes 400 ms late
    expect(await redis.exists(store.keyOf(`:op:${key}`))).toBe(1);
    await expect.poll(() => redis.exists(store.keyOf(`:op:${key}`)), { timeout: 3_000 }).toBe(0);
    proxy.setDelay(0);
    await sleep(500); // the release's own answer is still on its way through the proxy
    await expect(engine.run({ key, name: 'op', payload: 1 }, async () => 'ran')).resolves.toEqual({ value: 'ran', replayed: false });
    slowClient.disconnect();
    await proxy.close();
  });
});

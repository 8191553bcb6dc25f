/**
 * The engine on its own, as a queue consumer or webhook handler would use it.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { createIdempotencyEngine, type IdempotencyEvent, memoryStore } from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import { startTcpProxy } from '../helpers/proxy.js';
import { connectRedis, deleteByPrefix, REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { gate } from '../helpers/trpc.js';
import { elapse, useRealTime, useVirtualTime, virtualEngine } from '../helpers/virtual-time.js';

const redis = connectRedis();
const prefix = uniquePrefix('engine');
afterAll(async () => {
  await deleteByPrefix(redis, prefix);
  redis.disconnect();
});

describe('engine outside tRPC', () => {
  it('the empty scope and no scope are two owners of a key; a scope too long for a store key is refused, not a 503', async () => {
    const engine = createIdempotencyEngine({ store: memoryStore() });
    const runs: string[] = [];
    const handle = (scope: string | undefined) =>
      engine.run({ key: 'k1', name: 'orders.paid', scope, payload: { n: 1 } }, async () => {
        runs.push(String(scope));
        return runs.length;
      });
    expect(await handle(undefined)).toEqual({ value: 1, replayed: false });
    expect(await handle('')).toEqual({ value: 2, replayed: false });
    expect(await handle('')).toEqual({ value: 2, replayed: true });
    await expect(handle('t'.repeat(3_000))).rejects.toMatchObject({
      name: 'IdempotencyError',
      reason: 'input_unsupported',
      message: expect.stringMatching(
        /takes 3\d{3} bytes, more than the 2048 a store keeps as a key\. Use a shorter scope/,
      ),
    });
    expect(runs).toEqual(['undefined', '']);
  });

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
    const running = gate();
    const stalled = gate();
    const input = { key: 'k1', name: 'transfer', payload: { amount: 5 } };

    const a = engine.run(input, async () => {
      running.open();
      await stalled.opened; // a long GC pause or a frozen VM
      return 'from A';
    });
    await running.opened;
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
    const run = engine.run({ key, name: 'slow', payload: {} }, async ({ signal }) => {
      // Someone deletes the record (an operator, a restart of Redis): the claim is gone.
      await redis.del(store.keyOf(`:slow:${key}`));
      // the next renewal (lockTtl / 3 later) finds it gone
      await expect.poll(() => signal.aborted, { timeout: 3_000 }).toBe(true);
      return 'finished anyway';
    });
    await expect(run).resolves.toMatchObject({ value: 'finished anyway' });
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
    await expect(engine.run({ key: 'k', name: 'op', payload: 1 }, async () => 2)).resolves.toEqual({
      value: 2,
      replayed: false,
    });
  });
});

describe('a slow store', () => {
  it('gives back a claim that lands after the store timeout, instead of blocking the key for lockTtl', async () => {
    const proxy = await startTcpProxy({
      targetPort: Number(new URL(REDIS_URL).port || 6379),
      targetHost: new URL(REDIS_URL).hostname,
    });
    const slowClient = new Redis({ port: proxy.port });
    await slowClient.ping();
    proxy.setDelay(400);
    const store = redisStore({ client: slowClient, prefix });
    // the late claim's release, whose answer the test waits for
    const releaseAnswered = gate();
    const engine = createIdempotencyEngine({
      store: { ...store, release: (input) => store.release(input).finally(releaseAnswered.open) },
      storeTimeout: 100,
      lockTtl: 30_000,
    });
    const key = randomUUID();
    let ran = false;
    await expect(engine.run({ key, name: 'op', payload: 1 }, async () => (ran = true))).rejects.toMatchObject({
      reason: 'store_unavailable',
    });
    expect(ran).toBe(false);
    // the claim reached Redis at once; its answer comes 400 ms late
    expect(await redis.exists(store.keyOf(`:op:${key}`))).toBe(1);
    await expect.poll(() => redis.exists(store.keyOf(`:op:${key}`)), { timeout: 3_000 }).toBe(0);
    proxy.setDelay(0);
    // Its answer left Redis while the delay was on: the next claim's answer would queue behind it in the proxy.
    await releaseAnswered.opened;
    await expect(engine.run({ key, name: 'op', payload: 1 }, async () => 'ran')).resolves.toEqual({
      value: 'ran',
      replayed: false,
    });
    slowClient.disconnect();
    await proxy.close();
  });
});

describe('outcomes that cannot be replayed', () => {
  it('a success whose result cannot be serialized is not run again: retries get outcome_unreplayable', async () => {
    const engine = createIdempotencyEngine({ store: memoryStore() });
    let charges = 0;
    const charge = () =>
      engine.run({ key: 'msg-1', name: 'charge', payload: { cents: 100 } }, async () => {
        charges++;
        return { cents: 100n }; // JSON has no BigInt
      });
    await expect(charge()).resolves.toEqual({ value: { cents: 100n }, replayed: false });
    await expect(charge()).rejects.toMatchObject({
      reason: 'outcome_unreplayable',
      message: expect.stringMatching(/will not run again/),
    });
    expect(charges).toBe(1);
  });

  it('a streamed output is not stored as an empty object', async () => {
    const engine = createIdempotencyEngine({ store: memoryStore() });
    let runs = 0;
    const stream = () =>
      engine.run({ key: 'k', name: 'export', payload: {} }, async () => {
        runs++;
        return (async function* () {
          yield 1;
        })();
      });
    await stream();
    await expect(stream()).rejects.toMatchObject({ reason: 'outcome_unreplayable' });
    expect(runs).toBe(1);
  });
});

describe('the claim while the operation runs', () => {
  it('maxRunTime stops renewing a hung operation, aborts its signal, and frees the key lockTtl later', async () => {
    const events: IdempotencyEvent[] = [];
    const engine = createIdempotencyEngine({
      store: redisStore({ client: redis, prefix }),
      lockTtl: 150,
      maxRunTime: 300,
      onEvent: (e) => events.push(e),
    });
    const input = { key: randomUUID(), name: 'hung', payload: {} };
    let runs = 0;
    let aborted = false;
    const hung = engine.run(input, ({ signal }) => {
      runs++;
      return new Promise<string>((resolve) => {
        signal.addEventListener('abort', () => {
          aborted = true;
          resolve('gave up');
        });
      });
    });
    await expect(hung).resolves.toMatchObject({ value: 'gave up' });
    expect(aborted).toBe(true);
    expect(events.filter((e) => e.result === 'lease_lost').map((e) => e.reason)).toContain('max_run_time');
    // its late completion still stored the outcome (no one else held the key): the retry replays it
    await expect(engine.run(input, async () => 'again')).resolves.toEqual({ value: 'gave up', replayed: true });
    expect(runs).toBe(1);
  });

  it('declares the claim lost when renewals fail for a whole lockTtl', async () => {
    const proxy = await startTcpProxy({
      targetPort: Number(new URL(REDIS_URL).port || 6379),
      targetHost: new URL(REDIS_URL).hostname,
    });
    const client = new Redis({ port: proxy.port, maxRetriesPerRequest: 0, retryStrategy: () => 100 });
    client.on('error', () => {});
    await client.ping();
    const events: IdempotencyEvent[] = [];
    const engine = createIdempotencyEngine({
      store: redisStore({ client, prefix }),
      lockTtl: 300,
      storeTimeout: 100,
      onEvent: (e) => events.push(e),
    });
    const run = engine
      .run({ key: randomUUID(), name: 'cut-off', payload: {} }, ({ signal }) => {
        void proxy.close(); // Redis becomes unreachable while the operation runs
        return new Promise<string>((resolve) => signal.addEventListener('abort', () => resolve('aborted')));
      })
      .catch((e) => e);
    expect(await run).toMatchObject({ value: 'aborted' });
    expect(events.filter((e) => e.result === 'store_error').map((e) => e.operation)).toContain('extend');
    expect(events.filter((e) => e.result === 'lease_lost').map((e) => e.reason)).toEqual(['unconfirmed']);
    client.disconnect();
  });

  it("does not abort the operation when the caller goes away: the caller's retry gets the replay", async () => {
    useVirtualTime();
    onTestFinished(useRealTime);
    const store = memoryStore();
    const engine = virtualEngine({ store, lockTtl: 300 });
    const caller = new AbortController();
    let sawAbort = false;
    const input = { key: 'k-gone', name: 'pay', payload: {}, signal: caller.signal };
    const first = engine.run(input, async ({ signal }) => {
      caller.abort(); // the HTTP client timed out
      await elapse(1_000); // on virtual time: three lockTtls, every renewal and timer in them run
      sawAbort = signal.aborted;
      return 'charged';
    });
    await vi.advanceTimersByTimeAsync(1_000);
    await expect(first).resolves.toEqual({ value: 'charged', replayed: false });
    expect(sawAbort).toBe(false);
    await expect(engine.run({ ...input, signal: undefined }, async () => 'twice')).resolves.toEqual({
      value: 'charged',
      replayed: true,
    });
    store.close();
  });

  it('in wait mode, a store failure after the holder was seen running answers 409 even when failing open', async () => {
    const proxy = await startTcpProxy({
      targetPort: Number(new URL(REDIS_URL).port || 6379),
      targetHost: new URL(REDIS_URL).hostname,
    });
    const client = new Redis({ port: proxy.port, maxRetriesPerRequest: 0, retryStrategy: () => 100 });
    client.on('error', () => {});
    await client.ping();
    const store = redisStore({ client, prefix });
    // opened once the waiter's first claim was answered: it has seen the holder running
    const holderSeen = gate();
    const holderEngine = createIdempotencyEngine({ store: redisStore({ client: redis, prefix }) });
    const events: IdempotencyEvent[] = [];
    const waiter = createIdempotencyEngine({
      store: { ...store, claim: (claim) => store.claim(claim).finally(holderSeen.open) },
      inFlight: 'wait',
      waitTimeout: 5_000,
      onStoreError: 'fail-open',
      storeTimeout: 200,
      onEvent: (event) => events.push(event),
    });
    const input = { key: randomUUID(), name: 'pay', payload: {} };
    const release = gate();
    let runs = 0;
    const holder = holderEngine.run(input, async () => {
      runs++;
      await release.opened;
      return 'first';
    });
    await expect.poll(() => runs).toBe(1);
    const waiting = waiter.run(input, async () => ++runs).catch((e) => e);
    await holderSeen.opened;
    await proxy.close();
    expect(await waiting).toMatchObject({ reason: 'in_progress' });
    // One check, answered 409: the failed claim behind it is not a second one (a failed claim counts as a check).
    expect(events.filter((e) => e.result === 'in_progress' || e.operation === 'claim').map((e) => e.result)).toEqual([
      'in_progress',
    ]);
    release.open();
    await holder;
    expect(runs).toBe(1);
    await store.close();
    client.disconnect();
  });
});

describe('a completion that fails', () => {
  it('is retried in the background, so the outcome is stored and replayed rather than run again', async () => {
    const proxy = await startTcpProxy({
      targetPort: Number(new URL(REDIS_URL).port || 6379),
      targetHost: new URL(REDIS_URL).hostname,
    });
    const client = new Redis({ port: proxy.port });
    await client.ping();
    const events: IdempotencyEvent[] = [];
    const store = redisStore({ client, prefix });
    const engine = createIdempotencyEngine({
      store,
      storeTimeout: 200,
      lockTtl: 10_000,
      onEvent: (e) => events.push(e),
    });
    const input = { key: randomUUID(), name: 'charge', payload: { cents: 5 } };
    let runs = 0;
    const first = await engine.run(input, async () => {
      runs++;
      proxy.setDelay(1_000); // the network slows down just as the charge completes
      return 'ch_1';
    });
    expect(first).toEqual({ value: 'ch_1', replayed: false });
    expect(events.map((e) => [e.result, e.operation])).toContainEqual(['store_error', 'complete']);
    proxy.setDelay(0);
    await expect
      .poll(() => events.some((e) => e.result === 'completed' && e.reason === 'completed_late'), { timeout: 8_000 })
      .toBe(true);
    await expect(engine.run(input, async () => 'ch_2')).resolves.toEqual({ value: 'ch_1', replayed: true });
    expect(runs).toBe(1);
    expect(events.filter((e) => e.result === 'lease_lost')).toEqual([]);
    client.disconnect();
    await proxy.close();
  });
});

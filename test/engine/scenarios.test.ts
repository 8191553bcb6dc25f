/**
 * The seven scenarios of the reference write-up, over HTTP with a real tRPC
 * server (the pay app, test/fixtures/pay-app.ts) and client, on each store:
 *   1 no key: 400            2 first call: runs, stored     3 same key: replayed
 *   4 other payload: 422     5 concurrent: one runs, 409    6 crashed holder: retry runs after lockTtl
 *   7 store down: 503 fail-closed, runs fail-open (Redis and PostgreSQL: the embedded stores cannot be down)
 * The crash of a real process is in multiprocess.test.ts.
 */
import { randomUUID } from 'node:crypto';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { fingerprint, recordId } from '../../src/core.js';
import { drizzleStore } from '../../src/drizzle.js';
import type { IdempotencyStore } from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import { type PayApp, startPayApp } from '../fixtures/pay-app.js';
import { deadRedis, hungRedis } from '../helpers/redis.js';
import { liveStores } from '../helpers/stores.js';
import { createClient, gate, rejectionOf, type Seen, sleep } from '../helpers/trpc.js';

const LOCK_TTL = 1_500;

const apps: PayApp[] = [];
afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => app.close()));
});

/** The pay app on `store`, and a tRPC client for it. */
async function setup(
  store: IdempotencyStore,
  options: { onStoreError?: 'fail-closed' | 'fail-open'; storeTimeout?: number; seen?: Seen } = {},
) {
  const app = await startPayApp({
    store,
    lockTtl: LOCK_TTL,
    storeTimeout: options.storeTimeout, // by default lockTtl / 3
    onStoreError: options.onStoreError,
  });
  apps.push(app);
  return { app, client: createClient<PayApp['router']>(app.url, { seen: options.seen }) };
}

const { stores } = liveStores('scenarios', ['memory', 'redis', 'postgres', 'PGlite', 'mariadb']);

describe.each(stores)('scenarios on the $name store', ({ make: makeStore }) => {
  it('1. a mutation without a key is refused with 400 and does not run', async () => {
    const { app, client } = await setup(makeStore());
    const error = await rejectionOf(client.pay.mutate({ amount: 100, currency: 'EUR' }));
    expect(error.data).toMatchObject({ httpStatus: 400, code: 'BAD_REQUEST', idempotency: { reason: 'key_missing' } });
    expect(error.message).toMatch(/requires an Idempotency-Key header/);
    expect(app.executions).toHaveLength(0);
  });

  it('2 and 3. the first call runs and is stored; the same key again replays it without running', async () => {
    const seen: Seen = [];
    const { app, client } = await setup(makeStore(), { seen });
    const key = randomUUID();
    const first = await client.pay.mutate({ amount: 100, currency: 'EUR' }, { context: { key } });
    expect(first).toMatchObject({ amount: 100, currency: 'EUR' });
    expect(seen[0]!.get('idempotent-replayed')).toBeNull();

    const replay = await client.pay.mutate({ amount: 100, currency: 'EUR' }, { context: { key } });
    expect(replay).toEqual(first);
    expect(seen[1]!.get('idempotent-replayed')).toBe('true');
    expect(app.executions).toHaveLength(1);
    expect(app.events.map((e) => e.result)).toEqual(['acquired', 'completed', 'replayed']);
  });

  it('4. the same key with another payload is refused with 422', async () => {
    const { app, client } = await setup(makeStore());
    const key = randomUUID();
    await client.pay.mutate({ amount: 100, currency: 'EUR' }, { context: { key } });
    const error = await rejectionOf(client.pay.mutate({ amount: 999, currency: 'EUR' }, { context: { key } }));
    expect(error.data).toMatchObject({
      httpStatus: 422,
      code: 'UNPROCESSABLE_CONTENT',
      idempotency: { reason: 'payload_mismatch' },
    });
    expect(error.message).toMatch(/different payload.*new key/);
    expect(app.executions).toHaveLength(1);
  });

  it('5. two concurrent calls with one key: one runs, the other gets 409 with Retry-After', async () => {
    const seen: Seen = [];
    const { app, client } = await setup(makeStore(), { seen });
    const release = gate();
    app.hold(release.opened);
    const key = randomUUID();
    const first = client.pay.mutate({ amount: 100, currency: 'EUR' }, { context: { key } });
    await expect.poll(() => app.executions.length).toBe(1);
    const error = await rejectionOf(client.pay.mutate({ amount: 100, currency: 'EUR' }, { context: { key } }));
    expect(error.data).toMatchObject({
      httpStatus: 409,
      code: 'CONFLICT',
      idempotency: { reason: 'in_progress', retryAfter: 1 },
    });
    expect(seen.at(-1)!.get('retry-after')).toBe('1');
    release.open();
    await expect(first).resolves.toMatchObject({ amount: 100 });
    expect(app.executions).toHaveLength(1);
  });

  it('6. a claim whose holder died expires after lockTtl, and the retry runs', async () => {
    const store = makeStore();
    const { app, client } = await setup(store);
    const key = randomUUID();
    // A holder that claimed the key and then died: it never completes, releases or renews.
    const claimed = await store.claim({
      id: recordId(undefined, 'pay', key),
      fingerprint: fingerprint('pay', { amount: 100, currency: 'EUR' }),
      token: 'dead-holder',
      lockTtl: LOCK_TTL,
    });
    expect(claimed).toMatchObject({ state: 'acquired' });
    const blocked = await rejectionOf(client.pay.mutate({ amount: 100, currency: 'EUR' }, { context: { key } }));
    expect(blocked.data?.httpStatus).toBe(409);
    await sleep(LOCK_TTL + 100); // real time: the claim expires in the store's own clock (Redis, PostgreSQL)
    await expect(client.pay.mutate({ amount: 100, currency: 'EUR' }, { context: { key } })).resolves.toMatchObject({
      amount: 100,
    });
    expect(app.executions).toHaveLength(1);
  });
});

describe('7. the store is unreachable', () => {
  it('fail-closed (the default): 503 within the store timeout, and the procedure does not run', async () => {
    const dead = deadRedis();
    const seen: Seen = [];
    const { app, client } = await setup(redisStore({ client: dead }), { storeTimeout: 300, seen });
    const error = await rejectionOf(
      client.pay.mutate({ amount: 100, currency: 'EUR' }, { context: { key: randomUUID() } }),
    );
    expect(error.data).toMatchObject({
      httpStatus: 503,
      code: 'SERVICE_UNAVAILABLE',
      idempotency: { reason: 'store_unavailable', retryAfter: 1 },
    });
    expect(seen[0]!.get('retry-after')).toBe('1');
    expect(error.message).toMatch(/Retry later with the same key/);
    expect(app.executions).toHaveLength(0);
    expect(app.events.map((e) => e.result)).toEqual(['store_error']);
    dead.disconnect();
  });

  it('fail-closed when the store hangs: 503 once the store timeout passes', async () => {
    const hung = await hungRedis();
    const { app, client } = await setup(redisStore({ client: hung.client }), { storeTimeout: 300 });
    const error = await rejectionOf(
      client.pay.mutate({ amount: 100, currency: 'EUR' }, { context: { key: randomUUID() } }),
    );
    expect(error.data).toMatchObject({ httpStatus: 503, idempotency: { reason: 'store_unavailable' } });
    expect(error.message).toMatch(/Retry later with the same key/);
    expect(app.events).toMatchObject([
      {
        result: 'store_error',
        operation: 'claim',
        error: { message: 'The idempotency store did not answer claim within 300 ms.' },
      },
    ]);
    expect(app.executions).toHaveLength(0);
    await hung.close();
  });

  it('fail-open: the procedure runs unprotected and an event says so', async () => {
    const dead = deadRedis();
    const { app, client } = await setup(redisStore({ client: dead }), { storeTimeout: 300, onStoreError: 'fail-open' });
    await expect(
      client.pay.mutate({ amount: 100, currency: 'EUR' }, { context: { key: randomUUID() } }),
    ).resolves.toMatchObject({
      amount: 100,
    });
    expect(app.executions).toHaveLength(1);
    expect(app.events.map((e) => [e.result, e.reason ?? e.operation])).toEqual([
      ['store_error', 'claim'],
      ['unprotected', 'store_error'],
    ]);
    dead.disconnect();
  });
});

describe('7. PostgreSQL is unreachable', () => {
  const deadPostgres = () => {
    const pool = new pg.Pool({
      connectionString: 'postgres://postgres@127.0.0.1:1/test',
      connectionTimeoutMillis: 2_000,
    });
    pool.on('error', () => {});
    return { store: drizzleStore({ db: drizzlePg(pool) }), pool };
  };

  it('fail-closed: 503 and the procedure does not run', async () => {
    const { store, pool } = deadPostgres();
    const { app, client } = await setup(store);
    const key = randomUUID();
    const error = await rejectionOf(client.pay.mutate({ amount: 100, currency: 'EUR' }, { context: { key } }));
    expect(error.data).toMatchObject({ httpStatus: 503, idempotency: { reason: 'store_unavailable' } });
    expect(app.executions).toHaveLength(0);
    expect(app.events[0]).toMatchObject({
      result: 'store_error',
      operation: 'claim',
      error: { message: expect.stringMatching(/ECONNREFUSED/) },
    });
    // Drizzle quotes the statement and its parameters in its errors: none of that reaches events
    expect(JSON.stringify(app.events)).not.toContain(key);
    expect(JSON.stringify(app.events)).not.toContain('insert into');
    await pool.end();
  });

  it('fail-open: the procedure runs unprotected', async () => {
    const { store, pool } = deadPostgres();
    const { app, client } = await setup(store, { onStoreError: 'fail-open' });
    await expect(
      client.pay.mutate({ amount: 100, currency: 'EUR' }, { context: { key: randomUUID() } }),
    ).resolves.toMatchObject({ amount: 100 });
    expect(app.executions).toHaveLength(1);
    await pool.end();
  });
});

/**
 * The paths that used to run an operation twice, on every store: an outcome
 * that cannot be replayed, a result over maxResponseBytes, a value JSON would
 * change, contended takeovers under every isolation level, and store failures
 * that are not outages under fail-open.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { recordId } from '../../src/core.js';
import { drizzleStore } from '../../src/drizzle.js';
import {
  createIdempotencyEngine,
  type IdempotencyEngineOptions,
  type IdempotencyEvent,
  type IdempotencyStore,
  memoryStore,
} from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import { isolatedSchema } from '../helpers/postgres.js';
import { sleep } from '../helpers/redis.js';
import { liveStores } from '../helpers/stores.js';
import { gate } from '../helpers/trpc.js';

const { stores, redis, prefix } = liveStores('run-once', [
  'memory',
  'redis',
  'postgres',
  'postgres, REPEATABLE READ',
  'postgres, SERIALIZABLE',
  'PGlite',
  'mariadb',
  'mariadb, single connection',
]);

describe.each(stores)('on $name', ({ make: makeStore }) => {
  // These tests are about what is stored, not about timeouts: a store timeout (at most lockTtl / 3) that a claim on a
  // loaded machine meets, a new pool connection included (200 ms was not always enough in CI).
  const LOCK_TTL = 1_500;
  let shared: IdempotencyStore | undefined;
  function engineOn(options: IdempotencyEngineOptions = {}) {
    const events: IdempotencyEvent[] = [];
    shared ??= makeStore();
    const engine = createIdempotencyEngine({
      store: shared,
      lockTtl: LOCK_TTL,
      storeTimeout: LOCK_TTL / 3,
      onEvent: (e) => events.push(e),
      ...options,
    });
    return { engine, events };
  }

  /** Runs `result()` under a new key now, again at once, and (`later`) again after lockTtl: it must run once. */
  async function runThrice(engine: ReturnType<typeof engineOn>['engine'], result: () => unknown, later = true) {
    const input = { key: randomUUID(), name: 'charge', payload: { cents: 100 } };
    let runs = 0;
    const attempt = () =>
      engine.run(input, async () => {
        runs++;
        return result();
      });
    const first = await attempt();
    const again = await attempt().catch((e: unknown) => e);
    if (!later) return { first, again, later: again, runs };
    await sleep(LOCK_TTL + 100); // real time: the stores measure expiry; a claim not settled has expired by now
    return { first, again, later: await attempt().catch((e: unknown) => e), runs };
  }

  it('a result the codec cannot serialize reaches its caller; retries get outcome_unreplayable and it never runs again', async () => {
    const { engine, events } = engineOn();
    const { first, again, later, runs } = await runThrice(engine, () => ({ cents: 100n }));
    expect(first).toEqual({ value: { cents: 100n }, replayed: false });
    for (const retry of [again, later]) {
      expect(retry).toMatchObject({
        reason: 'outcome_unreplayable',
        message: expect.stringMatching(/will not run again/),
      });
    }
    expect(runs).toBe(1);
    expect(events.filter((e) => e.result === 'completed').map((e) => e.reason)).toEqual(['unreplayable']);
  });

  it('a Map, a Set or a Date is not replayed changed: retries get outcome_unreplayable', async () => {
    const { engine } = engineOn();
    for (const value of [new Map([['a', 1]]), new Set([1]), { at: new Date(0) }, [1, undefined, 2]]) {
      const { first, again, runs } = await runThrice(engine, () => value, false);
      expect(first).toEqual({ value, replayed: false });
      expect(again).toMatchObject({ reason: 'outcome_unreplayable' });
      expect(runs).toBe(1);
    }
  });

  it('a result over maxResponseBytes reaches its caller; retries get response_too_large and it never runs again', async () => {
    const { engine, events } = engineOn({ maxResponseBytes: 100 });
    const { first, again, later, runs } = await runThrice(engine, () => 'x'.repeat(500));
    expect(first).toEqual({ value: 'x'.repeat(500), replayed: false });
    for (const retry of [again, later]) {
      expect(retry).toMatchObject({
        reason: 'response_too_large',
        message: expect.stringMatching(/ran, but .* will not run again/),
      });
    }
    expect(runs).toBe(1);
    expect(events.filter((e) => e.result === 'released')).toEqual([]);
  });

  it('contended takeovers of expired claims: each key runs once, contention is never a 503, even failing open', async () => {
    const store = makeStore();
    const events: IdempotencyEvent[] = [];
    // A generous store timeout: this test is about contention, not about a slow machine. A claim that
    // times out counts as an outage, and failing open then runs unprotected, as documented; with 400
    // claims queued on one pool and a database shared with other work, 2 s is not always enough.
    const engine = createIdempotencyEngine({
      store,
      lockTtl: 60_000,
      storeTimeout: 20_000,
      onStoreError: 'fail-open',
      onEvent: (e) => events.push(e),
    });
    const keys = Array.from({ length: 4 }, () => randomUUID());
    // each key's holder crashed: its claim expires, then 100 requests race to take it over
    for (const key of keys)
      await store.claim({
        id: recordId(undefined, 'pay', key),
        fingerprint: 'crashed',
        token: `dead-${key}`,
        lockTtl: 100,
      });
    await sleep(200); // real time: the crashed claims (lockTtl 100) expire in the store's clock
    const REQUESTS = 100;
    const runs = new Map<string, number>();
    const answered = new Map<string, number>();
    // A key's winner holds it until every other request for that key was answered: they all contend while it runs.
    const othersAnswered = new Map<string, ReturnType<typeof gate>>(keys.map((key) => [key, gate()]));
    const check = (key: string) => {
      if ((answered.get(key) ?? 0) + (runs.get(key) ?? 0) >= REQUESTS) othersAnswered.get(key)!.open();
    };
    const answers = await Promise.all(
      keys.flatMap((key) =>
        Array.from({ length: REQUESTS }, () =>
          engine
            .run({ key, name: 'pay', payload: { key } }, async () => {
              runs.set(key, (runs.get(key) ?? 0) + 1);
              check(key);
              await othersAnswered.get(key)!.opened;
              return key;
            })
            .finally(() => {
              answered.set(key, (answered.get(key) ?? 0) + 1);
              check(key);
            })
            .then(
              (r) => (r.replayed ? 'replayed' : 'ran'),
              (e: { reason?: string }) => e.reason ?? String(e),
            ),
        ),
      ),
    );
    // no claim may have failed: a timed-out claim under fail-open runs unprotected, by design
    expect(events.filter((e) => e.result === 'store_error').map((e) => e.error?.message)).toEqual([]);
    expect([...runs.values()]).toEqual(keys.map(() => 1));
    expect(answers.filter((a) => a === 'ran')).toHaveLength(keys.length);
    expect(answers.filter((a) => a !== 'ran' && a !== 'replayed' && a !== 'in_progress')).toEqual([]);
    expect(events.filter((e) => e.result === 'unprotected')).toEqual([]);
  });
});

describe('fail-open lets a request through only when the store is unreachable', () => {
  const cases: [string, () => Promise<{ store: IdempotencyStore; cleanup?: () => Promise<unknown> }>][] = [
    [
      'a memory store full of running claims',
      async () => {
        const store = memoryStore({ maxEntries: 1 });
        await store.claim({ id: 'running', fingerprint: 'fp', token: 'r', lockTtl: 60_000 });
        return { store, cleanup: async () => store.close() };
      },
    ],
    [
      'a Redis that answers with an error (the record key holds a string)',
      async () => {
        const store = redisStore({ client: redis, prefix });
        return { store };
      },
    ],
    [
      'a PostgreSQL schema without the idempotency_keys table',
      async () => {
        const empty = await isolatedSchema('no_table', 2, false);
        return { store: drizzleStore({ db: empty.db }), cleanup: () => empty.drop() };
      },
    ],
  ];

  it.each(cases)('%s: 503 and the operation does not run, whatever onStoreError says', async (_name, make) => {
    const { store, cleanup } = await make();
    try {
      const key = randomUUID();
      await redis.set(`${prefix}{${recordId(undefined, 'pay', key)}}`, 'not a hash');
      for (const onStoreError of ['fail-closed', 'fail-open'] as const) {
        const events: IdempotencyEvent[] = [];
        const engine = createIdempotencyEngine({ store, onStoreError, onEvent: (e) => events.push(e) });
        let ran = false;
        const answer = await engine
          .run({ key, name: 'pay', payload: {} }, async () => (ran = true))
          .catch((e: unknown) => e);
        expect(answer).toMatchObject({ reason: 'store_unavailable' });
        expect(ran).toBe(false);
        expect(events.map((e) => e.result)).toEqual(['store_error']);
      }
    } finally {
      await cleanup?.();
    }
  });
});

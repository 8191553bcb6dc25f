/**
 * Recovery points (`step()`), through the engine, on each store that records
 * steps: memory, Redis and PostgreSQL (node-postgres).
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import {
  createIdempotencyEngine,
  deriveStepKey,
  type IdempotencyEngineOptions,
  type IdempotencyEvent,
  type IdempotencyStore,
  memoryStore,
  recordId,
  retryable,
} from '../../src/core.js';
import { drizzleStore } from '../../src/drizzle.js';
import { claimWithSteps } from '../helpers/records.js';
import { sleep } from '../helpers/redis.js';
import { liveStores } from '../helpers/stores.js';
import { gate } from '../helpers/trpc.js';

const live = liveStores('steps', ['memory', 'redis', 'postgres', 'mariadb']);

/** Counts how often each step's work really ran. */
function counter() {
  const runs: Record<string, number> = {};
  return {
    runs,
    work:
      <T>(name: string, value: T) =>
      async () => {
        runs[name] = (runs[name] ?? 0) + 1;
        return value;
      },
  };
}

const failOnce = () => {
  let failed = false;
  return () => {
    if (!failed) {
      failed = true;
      throw retryable(new Error('ledger unavailable'));
    }
  };
};

describe.each(live.stores)('steps on the $name store', ({ make: makeStore }) => {
  const engineWith = (options: IdempotencyEngineOptions = {}) => {
    const events: IdempotencyEvent[] = [];
    const engine = createIdempotencyEngine({ store: makeStore(), onEvent: (e) => events.push(e), ...options });
    return { engine, events };
  };

  it('a retry after a failure resumes after the completed steps, with their recorded results', async () => {
    const { engine, events } = engineWith();
    const { runs, work } = counter();
    const ledger = failOnce();
    const key = randomUUID();
    const pay = () =>
      engine.run({ key, name: 'pay', payload: { amount: 10 } }, async ({ step }) => {
        const reservation = await step('reserve', work('reserve', { id: 'res_1' }));
        const charge = await step('charge', work('charge', { id: 'ch_1', at: Date.now() }));
        ledger();
        return { reservation: reservation.id, charge };
      });
    await expect(pay()).rejects.toThrow('ledger unavailable');
    const first = events.filter((e) => e.result === 'step').map((e) => `${e.step}:${e.reason}`);
    expect(first).toEqual(['reserve:ran', 'charge:ran']);
    events.length = 0;
    const retried = await pay();
    expect(runs).toEqual({ reserve: 1, charge: 1 });
    expect(retried.replayed).toBe(false);
    expect(retried.value.reservation).toBe('res_1');
    expect(events.filter((e) => e.result === 'step').map((e) => `${e.step}:${e.reason}`)).toEqual([
      'reserve:resumed',
      'charge:resumed',
    ]);
    // The completed operation replays its outcome, as any other.
    expect(await pay()).toEqual({ value: retried.value, replayed: true });
    expect(runs).toEqual({ reserve: 1, charge: 1 });
  });

  it('a holder whose claim expired (a crash) is followed by one that resumes after its last recorded step', async () => {
    // maxRunTime stops renewing the first holder's claim, as a crash would; it expires lockTtl later.
    const { engine } = engineWith({ lockTtl: 900, storeTimeout: 300, maxRunTime: 50 });
    const { runs, work } = counter();
    const key = randomUUID();
    let stall = true;
    const pay = () =>
      engine.run({ key, name: 'pay', payload: {} }, async ({ step }) => {
        await step('reserve', work('reserve', 'r'));
        if (stall) await new Promise(() => {}); // never returns: the "crashed" holder
        await step('charge', work('charge', 'c'));
        return 'done';
      });
    void pay();
    await expect.poll(() => runs.reserve).toBe(1);
    stall = false;
    // 409 while the stalled claim lives, then the retry that takes it over and finishes. On a loaded
    // machine the takeover's completion may outlast storeTimeout (an error to that caller, the outcome
    // stored all the same), and the next retry replays it: the runs below tell that the charge ran once.
    await expect
      .poll(
        () =>
          pay().then(
            (r) => `${r.value}`,
            (e: Error) => e.message,
          ),
        { timeout: 15_000 },
      )
      .toBe('done');
    expect(runs).toEqual({ reserve: 1, charge: 1 });
  });

  it('refuses a retry that reaches other steps than those recorded, naming both, and keeps them for the right code', async () => {
    const { engine } = engineWith();
    const { runs, work } = counter();
    const key = randomUUID();
    const ledger = failOnce();
    await expect(
      engine.run({ key, name: 'pay', payload: {} }, async ({ step }) => {
        await step('reserve', work('reserve', 1));
        await step('charge', work('charge', 2));
        ledger();
      }),
    ).rejects.toThrow('ledger unavailable');
    const renamed = engine.run({ key, name: 'pay', payload: {} }, async ({ step }) => {
      await step('reserve', work('reserve', 1));
      await step('capture', work('capture', 2));
    });
    await expect(renamed).rejects.toMatchObject({ reason: 'step_mismatch' });
    await expect(renamed).rejects.toThrow(
      'This run reached the steps ["reserve", "capture"], but an earlier run of this key recorded ["reserve", "charge"]',
    );
    // A skipped step: this run returns without reaching "charge".
    const skipped = engine.run({ key, name: 'pay', payload: {} }, async ({ step }) => {
      await step('reserve', work('reserve', 1));
      return 'early';
    });
    await expect(skipped).rejects.toThrow(
      'This run reached the steps ["reserve"], but an earlier run of this key recorded ["reserve", "charge"]',
    );
    expect(runs).toEqual({ reserve: 1, charge: 1 });
    // The code that reaches the recorded steps finishes the operation.
    const fixed = await engine.run({ key, name: 'pay', payload: {} }, async ({ step }) => {
      await step('reserve', work('reserve', 1));
      await step('charge', work('charge', 2));
      return 'ok';
    });
    expect(fixed).toEqual({ value: 'ok', replayed: false });
    expect(runs).toEqual({ reserve: 1, charge: 1 });
  });

  it('refuses another payload on a key whose steps are recorded (422), and the first payload still resumes', async () => {
    const { engine } = engineWith();
    const { runs, work } = counter();
    const key = randomUUID();
    const ledger = failOnce();
    const pay = (amount: number) =>
      engine.run({ key, name: 'pay', payload: { amount } }, async ({ step }) => {
        await step('charge', work(`charge ${amount}`, amount));
        ledger();
        return amount;
      });
    await expect(pay(10)).rejects.toThrow('ledger unavailable');
    await expect(pay(99)).rejects.toMatchObject({ reason: 'payload_mismatch' });
    expect(await pay(10)).toEqual({ value: 10, replayed: false });
    expect(runs).toEqual({ 'charge 10': 1 });
  });

  it('deletes the steps with the stored outcome: once it expires, the key runs afresh', async () => {
    const { engine } = engineWith({ ttl: 1_000, lockTtl: 900, storeTimeout: 300 });
    const { runs, work } = counter();
    const key = randomUUID();
    const op = () => engine.run({ key, name: 'op', payload: {} }, ({ step }) => step('only', work('only', 1)));
    await op();
    await sleep(1_300); // real time: the outcome's ttl (1 s) runs in the store's clock
    expect(await op()).toEqual({ value: 1, replayed: false });
    expect(runs).toEqual({ only: 2 });
  });

  it('refuses a step result it cannot record before the operation goes on, and a retry runs that step again', async () => {
    const { engine } = engineWith({ maxResponseBytes: 100 });
    const { runs, work } = counter();
    const key = randomUUID();
    let after = 0;
    const op = (size: number) =>
      engine.run({ key, name: 'op', payload: {} }, async ({ step }) => {
        await step('big', work('big', 'x'.repeat(size)));
        after++;
        return 'ok';
      });
    const tooLarge = op(200);
    await expect(tooLarge).rejects.toMatchObject({ reason: 'step_unrecorded' });
    await expect(tooLarge).rejects.toThrow(
      'Step "big" completed, but the steps\' results would take 202 bytes, more than maxResponseBytes (100)',
    );
    expect(after).toBe(0);
    expect(await op(10)).toEqual({ value: 'ok', replayed: false });
    expect(runs).toEqual({ big: 2 });
    const unserializable = engine.run({ key: randomUUID(), name: 'op', payload: {} }, ({ step }) =>
      step('map', async () => new Map([[1, 2]])),
    );
    await expect(unserializable).rejects.toThrow('Step "map" completed, but its result cannot be serialized');
  });

  it('says what is wrong with a step used wrongly', async () => {
    const { engine } = engineWith();
    const run = (fn: Parameters<typeof engine.run>[1]) =>
      engine.run({ key: randomUUID(), name: 'op', payload: {} }, fn);
    const aHeld = gate();
    await expect(
      run(async ({ step }) => {
        await Promise.all([step('a', () => aHeld.opened), step('b', () => 1)]);
      }),
    ).rejects.toThrow('step("b") was called while step("a") is still running. Steps run one at a time, in order');
    aHeld.open();
    await expect(
      run(async ({ step }) => {
        await step('a', () => 1);
        await step('a', () => 2);
      }),
    ).rejects.toThrow('The step name "a" is used twice in this operation');
    await expect(run(({ step }) => step('', () => 1))).rejects.toThrow('A step needs a name, a non-empty string');
    // hashed as UTF-8, two names with lone surrogates would derive one downstream key
    await expect(run(({ step }) => step('charge-\uD800', () => 1))).rejects.toThrow(
      /not well-formed Unicode \(it holds a lone surrogate\)/,
    );
    const lateHeld = gate();
    await expect(
      run(async ({ step }) => {
        // Not awaited: its save, after the key was released, is refused, which this promise reports.
        step('late', () => lateHeld.opened).catch(() => {});
        return 'returned';
      }),
    ).rejects.toThrow('The operation returned while step("late") was still running');
    lateHeld.open();
  });

  it('derives the same stepKey for every retry of a key: a UUID, distinct per step, key, scope and operation', async () => {
    const { engine } = engineWith();
    const key = randomUUID();
    const keys: string[] = [];
    const op = (scope: string, name = 'pay') =>
      engine.run({ key, scope, name, payload: {} }, async ({ step, stepKey }) => {
        keys.push(stepKey('charge'));
        keys.push(await step('charge', ({ key: derived }) => derived));
        return 1;
      });
    await op('user-1');
    expect(keys[0]).toBe(keys[1]);
    expect(keys[0]).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(keys[0]).toBe(deriveStepKey(recordId('user-1', 'pay', key), 'charge'));
    await op('user-2');
    await op('user-1', 'refund');
    expect(new Set(keys).size).toBe(3);
    expect(deriveStepKey(recordId('user-1', 'pay', key), 'reserve')).not.toBe(keys[0]);
  });
});

describe('steps and the PostgreSQL store', () => {
  it('transactional mode: steps are recorded outside the transaction, which a retry redoes after them', async () => {
    const store = drizzleStore({ db: live.postgres().db });
    const engine = createIdempotencyEngine({ store, transaction: true });
    await live.postgres().db.execute(sql`create table if not exists ledger (key text, charge text)`);
    const { runs, work } = counter();
    const key = randomUUID();
    const ledger = failOnce();
    const pay = () =>
      engine.run({ key, name: 'pay', payload: {} }, async ({ step }) => {
        const charge = await step('charge', work('charge', 'ch_1'));
        await store.transactionOf().execute(sql`insert into ledger values (${key}, ${charge})`);
        ledger(); // the first time, the transaction rolls back: the ledger row goes, the step stays
        return charge;
      });
    await expect(pay()).rejects.toThrow('ledger unavailable');
    expect(await pay()).toEqual({ value: 'ch_1', replayed: false });
    expect(runs).toEqual({ charge: 1 });
    const rows = await live.postgres().pool.query('select charge from ledger where key = $1', [key]);
    expect(rows.rows).toEqual([{ charge: 'ch_1' }]);
    const left = await live
      .postgres()
      .pool.query('select count(*)::int as n from idempotency_steps where id like $1', [`%${key}`]);
    expect(left.rows[0].n).toBe(0);
  });

  it('purgeExpired deletes expired steps', async () => {
    const store = drizzleStore({ db: live.postgres().db });
    const id = `:purge:${randomUUID()}`;
    await claimWithSteps(store, id, { ttl: 100 });
    await sleep(200); // real time: the steps' ttl (100 ms) runs in PostgreSQL's clock
    expect(await store.purgeExpired()).toBeGreaterThanOrEqual(1);
    const left = await live
      .postgres()
      .pool.query('select count(*)::int as n from idempotency_steps where id = $1', [id]);
    expect(left.rows[0].n).toBe(0);
  });
});

describe('steps without a store that records them', () => {
  it('says so', async () => {
    const base = memoryStore();
    const store: IdempotencyStore = {
      claim: (i) => base.claim(i),
      complete: (i) => base.complete(i),
      release: (i) => base.release(i),
      extend: (i) => base.extend(i),
    };
    const engine = createIdempotencyEngine({ store });
    await expect(engine.run({ key: 'k', name: 'op', payload: {} }, ({ step }) => step('a', () => 1))).rejects.toThrow(
      'step("a"): this store (custom) cannot record steps',
    );
  });
});

/**
 * The PostgreSQL store: the contract on a real server (node-postgres) and on
 * PGlite, then what only PostgreSQL has: purge and transactional mode.
 */
import { randomUUID } from 'node:crypto';
import { drizzle } from 'drizzle-orm/node-postgres';
import { describe, expect, it } from 'vitest';
import { drizzleStore } from '../../src/drizzle.js';
import { describeStoreContract } from '../contract/store-contract.js';
import { isolatedSchema } from '../helpers/postgres.js';
import { sleep } from '../helpers/redis.js';
import { liveStores } from '../helpers/stores.js';

// The contract on a real server at each isolation level (some teams set a stricter default: contended claims then
// fail with serialization errors, which the store retries), and on PGlite.
const live = liveStores('contract', ['postgres', 'postgres, REPEATABLE READ', 'postgres, SERIALIZABLE', 'PGlite']);
for (const { name, make, notifies } of live.stores)
  describeStoreContract(name, () => ({ store: make(), advance: sleep }), { notifies });

describe('purgeExpired', () => {
  it('deletes expired rows in batches and leaves live claims and outcomes alone', async () => {
    const schema = await isolatedSchema('purge');
    try {
      const store = drizzleStore({ db: schema.db });
      for (let i = 0; i < 3; i++) {
        await store.claim({ id: `done-${i}`, fingerprint: 'fp', token: `t${i}`, lockTtl: 60_000 });
        await store.complete({
          fingerprint: 'fp',
          id: `done-${i}`,
          token: `t${i}`,
          state: 'completed',
          body: 'kept',
          ttl: 60_000,
        });
      }
      for (let i = 0; i < 2; i++)
        await store.claim({ id: `running-${i}`, fingerprint: 'fp', token: 'r', lockTtl: 60_000 });
      for (let i = 0; i < 5; i++) {
        await store.claim({ id: `stale-${i}`, fingerprint: 'fp', token: 's', lockTtl: 200 });
        if (i % 2 === 0)
          await store.complete({
            fingerprint: 'fp',
            id: `stale-${i}`,
            token: 's',
            state: 'completed',
            body: 'old',
            ttl: 200,
          });
      }
      await sleep(300); // real time: PostgreSQL's clock must pass the 200 ms expiries
      expect(await store.purgeExpired({ batchSize: 2, maxBatches: 1 })).toBe(2);
      expect(await store.purgeExpired({ batchSize: 2 })).toBe(3);
      expect(await store.purgeExpired()).toBe(0);
      const { rows } = await schema.pool.query<{ id: string; state: string }>(
        'select id, state from idempotency_keys order by id',
      );
      expect(rows.map((r) => r.id)).toEqual(['done-0', 'done-1', 'done-2', 'running-0', 'running-1']);
      expect(await store.claim({ id: 'running-0', fingerprint: 'fp', token: 'x', lockTtl: 1_000 })).toMatchObject({
        state: 'in_progress',
        fingerprint: 'fp',
      });
      expect(await store.claim({ id: 'done-1', fingerprint: 'fp', token: 'x', lockTtl: 1_000 })).toMatchObject({
        state: 'completed',
        body: 'kept',
      });
      await expect(store.purgeExpired({ batchSize: 0 })).rejects.toThrow(
        /purgeExpired: batchSize must be a whole number >= 1, got the number 0\./,
      );
    } finally {
      await schema.drop();
    }
  });

  it('can find expired rows through the index on expires_at', async () => {
    // A small table is scanned whole; forbidding that shows the index serves the purge's query.
    const client = await live.postgres().pool.connect();
    try {
      await client.query('begin');
      await client.query('set local enable_seqscan = off');
      const { rows } = await client.query(
        'explain select id from idempotency_keys where expires_at <= statement_timestamp() order by expires_at limit 1000 for update skip locked',
      );
      await client.query('rollback');
      expect(rows.map((r: { 'QUERY PLAN': string }) => r['QUERY PLAN']).join('\n')).toMatch(
        /Index Scan (using|on) idempotency_keys_expires_at_idx/,
      );
    } finally {
      client.release();
    }
  });
});

describe('store failures on PostgreSQL', () => {
  it('a statement timeout follows onStoreError: 503 when failing closed, with the reason in the event', async () => {
    const { createIdempotencyEngine, recordId } = await import('../../src/core.js');
    const { drizzle } = await import('drizzle-orm/node-postgres');
    const pg = (await import('pg')).default;
    const { withSearchPath, DATABASE_URL } = await import('../helpers/postgres.js');
    // sessions of this pool give up on any statement after 200 ms
    const url = new URL(withSearchPath(DATABASE_URL, live.postgres().schema));
    url.searchParams.set('options', `-c search_path=${live.postgres().schema} -c statement_timeout=200`);
    const pool = new pg.Pool({ connectionString: url.toString(), max: 2 });
    const events: { result: string; error?: { message: string } }[] = [];
    const engine = createIdempotencyEngine({
      store: drizzleStore({ db: drizzle(pool) }),
      storeTimeout: 5_000,
      onEvent: (e) => events.push(e),
    });
    const seed = drizzleStore({ db: live.postgres().db });
    const key = 'locked-key';
    await seed.claim({ id: recordId(undefined, 'op', key), fingerprint: 'fp', token: 'holder', lockTtl: 60_000 });
    // another session holds a lock the claim must wait for (a vacuum full, a migration...). A row lock
    // alone would not do: the claim only reads a live row held by another token, and answers at once.
    const locker = await live.postgres().pool.connect();
    await locker.query('begin');
    await locker.query('lock table idempotency_keys in access exclusive mode');
    try {
      let ran = false;
      await expect(engine.run({ key, name: 'op', payload: {} }, async () => (ran = true))).rejects.toMatchObject({
        reason: 'store_unavailable',
      });
      expect(ran).toBe(false);
      expect(events.at(-1)?.error?.message).toMatch(/statement timeout/);
    } finally {
      await locker.query('rollback');
      locker.release();
      await pool.end();
    }
  });
});

describe('a claim that finds a live row', () => {
  it('writes nothing: it leaves the row as it was, and answers while another transaction holds the row', async () => {
    const store = drizzleStore({ db: live.postgres().db });
    await store.claim({ id: 'live-held', fingerprint: 'fp', token: 'holder', lockTtl: 60_000 });
    await store.claim({ id: 'live-done', fingerprint: 'fp', token: 'holder', lockTtl: 60_000 });
    await store.complete({
      id: 'live-done',
      fingerprint: 'fp',
      token: 'holder',
      state: 'completed',
      body: 'kept',
      ttl: 60_000,
    });
    // xmin and xmax change with any write or row lock (a locked row gets the locker's xid as xmax).
    const versions = async () =>
      (
        await live
          .postgres()
          .pool.query(
            `select id, xmin::text, xmax::text, expires_at from idempotency_keys where id like 'live-%' order by id`,
          )
      ).rows;
    const claims = () =>
      Promise.all([
        store.claim({ id: 'live-held', fingerprint: 'fp', token: 'other', lockTtl: 1_000 }),
        store.claim({ id: 'live-done', fingerprint: 'fp', token: 'other', lockTtl: 1_000 }),
      ]);
    const expected = [
      { state: 'in_progress', fingerprint: 'fp' },
      { state: 'completed', fingerprint: 'fp', body: 'kept' },
    ];

    const before = await versions();
    expect(await claims()).toMatchObject(expected);
    expect(await versions()).toEqual(before);

    const locker = await live.postgres().pool.connect();
    try {
      await locker.query('begin');
      await locker.query(`select 1 from idempotency_keys where id like 'live-%' for update`);
      // A bound, not a wait: claims that queue behind the row locks would answer only at the rollback.
      const answered = await Promise.race([claims(), sleep(5_000).then(() => 'waited for the lock')]);
      expect(answered).toMatchObject(expected);
    } finally {
      await locker.query('rollback');
      locker.release();
    }
  });
});

describe('prepared statements (node-postgres)', () => {
  it('are named, so parsed once per connection; a connection that lost them (DISCARD ALL, a pooler) goes on unnamed', async () => {
    const pg = (await import('pg')).default;
    const { withSearchPath, DATABASE_URL } = await import('../helpers/postgres.js');
    const pool = new pg.Pool({ connectionString: withSearchPath(DATABASE_URL, live.postgres().schema), max: 1 });
    try {
      const store = drizzleStore({ db: drizzle(pool) });
      const claim = (id: string) => store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 60_000 });
      const named = async () =>
        (await pool.query(`select 1 from pg_prepared_statements where name like 'trpc_idempotency_%'`)).rowCount;

      expect(await claim('prepared-1')).toMatchObject({ state: 'acquired' });
      expect(await claim('prepared-1')).toMatchObject({ state: 'acquired' }); // the same token holds it again
      expect(await named()).toBe(1);

      // node-postgres still takes the statement for prepared on this connection: the server says
      // it does not exist (26000) before running anything, and the store runs it again unnamed.
      await pool.query('discard all');
      expect(await claim('prepared-2')).toMatchObject({ state: 'acquired' });
      expect(
        await store.complete({
          id: 'prepared-2',
          fingerprint: 'fp',
          token: 't',
          state: 'completed',
          body: 'ok',
          ttl: 60_000,
        }),
      ).toBe('stored');
      expect(await claim('prepared-2')).toMatchObject({ state: 'completed', body: 'ok' });
      expect(await named()).toBe(0);
    } finally {
      await pool.end();
    }
  });
});

describe('a claim whose snapshot misses what committed while it ran (one statement)', () => {
  // The claim is one statement: it reads the key and its steps in the statement's snapshot, and its insert
  // checks the key's index against the latest commits. Here another holder's claim, its step 0 and the end of its
  // claim commit after the claim's snapshot was taken and before its insert's check (in one transaction the claim
  // waits on, which is the same order with a deterministic gate): the claim must start after step 0, which was
  // left to the next holder, not run it again.
  const endings = {
    'released by its holder': (holder: ReturnType<typeof drizzleStore>, id: string) =>
      holder.release({ id, token: 'b' }),
    'forgotten by an operator (steps kept)': (holder: ReturnType<typeof drizzleStore>, id: string) =>
      holder.admin.forget({ id, state: 'in_progress', token: 'b' }),
  };
  for (const [ending, end] of Object.entries(endings))
    it(`a key taken, given a step and ${ending} meanwhile is resumed after that step: the step does not run twice`, async () => {
      const schema = await isolatedSchema('snapshot_race', 4);
      const other = await schema.pool.connect();
      try {
        const id = `race:${randomUUID()}`;
        await other.query('begin');
        const holder = drizzleStore({ db: drizzle(other) });
        expect(await holder.claim({ id, fingerprint: 'fp', token: 'b', lockTtl: 10_000 })).toMatchObject({
          state: 'acquired',
        });
        const step = { id, token: 'b', fingerprint: 'fp', index: 0, name: 'charge', body: '"ch_1"', ttl: 60_000 };
        expect(await holder.saveStep!({ ...step, lockTtl: 10_000 })).toBe('stored');
        expect(await end(holder, id)).toBe(true);

        const claimer = drizzleStore({ db: schema.db });
        const claim = claimer.claim({ id, fingerprint: 'fp', token: 'a', lockTtl: 10_000 });
        // The claim has taken its snapshot and waits on the key's index entry, which the open transaction holds.
        const [{ pid }] = (await other.query('select pg_backend_pid() as pid')).rows;
        const waiting = `select count(*)::int as n from pg_stat_activity where $1 = any(pg_blocking_pids(pid))`;
        await expect
          .poll(async () => (await schema.pool.query(waiting, [pid])).rows[0].n, { timeout: 10_000, interval: 20 })
          .toBe(1);
        await other.query('commit');
        expect(await claim).toMatchObject({
          state: 'acquired',
          steps: { fingerprint: 'fp', steps: [{ name: 'charge', body: '"ch_1"' }] },
        });
      } finally {
        other.release();
        await schema.drop();
      }
    });

  it('the purge keeps a claim that ended while its steps live, and deletes it once they have expired', async () => {
    // Deleting the ended claim's row would open the same window as deleting it at its end.
    const schema = await isolatedSchema('purge_ended', 2);
    try {
      const store = drizzleStore({ db: schema.db });
      const rows = async () =>
        (await schema.pool.query(`select id from idempotency_keys order by id`)).rows.map((row) => row.id);
      for (const [id, ttl] of [
        ['ended-steps-live', 60_000],
        ['ended-steps-expiring', 150],
      ] as const) {
        await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 60_000 });
        const step = {
          id,
          token: 't',
          fingerprint: 'fp',
          index: 0,
          name: 'charge',
          body: '"ch"',
          ttl,
          lockTtl: 60_000,
        };
        expect(await store.saveStep!(step)).toBe('stored');
        expect(await store.release({ id, token: 't' })).toBe(true);
      }
      await store.claim({ id: 'ended-no-steps', fingerprint: 'fp', token: 't', lockTtl: 60_000 });
      expect(await store.release({ id: 'ended-no-steps', token: 't' })).toBe(true);

      await store.purgeExpired({ batchSize: 10 });
      expect(await rows()).toEqual(['ended-steps-expiring', 'ended-steps-live']);
      await expect
        .poll(
          async () => {
            await store.purgeExpired({ batchSize: 10 });
            return rows();
          },
          { timeout: 10_000, interval: 50 },
        )
        .toEqual(['ended-steps-live']);
      // The row kept is expired: a claim takes it over, with the step.
      expect(
        await store.claim({ id: 'ended-steps-live', fingerprint: 'fp', token: 'u', lockTtl: 60_000 }),
      ).toMatchObject({
        state: 'acquired',
        steps: { steps: [{ name: 'charge' }] },
      });
    } finally {
      await schema.drop();
    }
  });
});

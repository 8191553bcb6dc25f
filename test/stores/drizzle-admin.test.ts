/**
 * The PostgreSQL store's operator API beyond the contract (test/contract/admin-contract.ts):
 * one statement per call, a listing paged by id over many rows, the claims in
 * progress through their partial index, rows without a lease (from before
 * migration 0002), the claim time a takeover resets, bodies stored encoded.
 */
import { drizzle } from 'drizzle-orm/node-postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotencyAdmin, type ListInput, type RecordSummary, recordId } from '../../src/core.js';
import { drizzleStore } from '../../src/drizzle.js';
import { LIST, LIST_IN_PROGRESS } from '../../src/stores/drizzle/admin.js';
import { isolatedSchema, type PgSchema } from '../helpers/postgres.js';
import { claimWithSteps } from '../helpers/records.js';
import { sleep } from '../helpers/redis.js';

let pgs: PgSchema;
const log: string[] = [];
beforeAll(async () => {
  pgs = await isolatedSchema('admin');
});
afterAll(async () => {
  await pgs?.drop();
});

const storeOf = () =>
  drizzleStore({ db: drizzle(pgs.pool, { logger: { logQuery: (query) => void log.push(query) } }) });

async function clear() {
  await pgs.pool.query('truncate idempotency_keys, idempotency_steps');
}

/** Every page of a listing, and each page's count of records examined. */
async function pages(store: ReturnType<typeof storeOf>, input: ListInput) {
  const records: RecordSummary[] = [];
  const examined: number[] = [];
  let cursor: string | undefined;
  do {
    const page = await store.admin.list({ ...input, cursor });
    records.push(...page.records);
    examined.push(page.examined);
    cursor = page.cursor;
  } while (cursor !== undefined && examined.length < 10_000);
  return { records, examined };
}

describe('the listing, paged by id', () => {
  it('reaches every live row once, in id order, a page reading at most `limit` rows; the claims in progress read only theirs', async () => {
    await clear();
    const store = storeOf();
    const ids = { held: [] as string[], done: [] as string[], expired: [] as string[], expiredHeld: [] as string[] };
    for (let i = 0; i < 60; i++) {
      const id = recordId(`u${i % 7}`, i % 2 === 0 ? 'orders.create' : 'payments.charge', `k${i}`);
      if (i % 5 === 0) {
        await store.claim({ id, fingerprint: 'fp', token: `t${i}`, lockTtl: 60_000 });
        ids.held.push(id);
      } else if (i % 5 === 1) {
        await store.claim({ id, fingerprint: 'fp', token: `t${i}`, lockTtl: 60_000 });
        await store.complete({ id, fingerprint: 'fp', token: `t${i}`, state: 'completed', body: `${i}`, ttl: 60_000 });
        ids.done.push(id);
      } else {
        await store.claim({ id, fingerprint: 'fp', token: `t${i}`, lockTtl: 60_000 });
        await store.complete({ id, fingerprint: 'fp', token: `t${i}`, state: 'failed', body: '"e"', ttl: 60_000 });
      }
    }
    // Expired rows are read (a page's cost) but never examined nor listed.
    for (let i = 0; i < 6; i++) {
      const id = recordId('u0', 'orders.create', `gone${i}`);
      await store.claim({ id, fingerprint: 'fp', token: 'g', lockTtl: 1 });
      (i % 2 === 0 ? ids.expiredHeld : ids.expired).push(id);
      if (i % 2 === 1)
        await store.complete({ id, fingerprint: 'fp', token: 'g', state: 'completed', body: '1', ttl: 1 });
    }
    await sleep(20); // real time: PostgreSQL's clock must pass the 1 ms expiries
    const { rows } = await pgs.pool.query<{ id: string; state: string }>(
      'select id, state from idempotency_keys order by id',
    );
    const live = rows.map((r) => r.id).filter((id) => !ids.expired.includes(id) && !ids.expiredHeld.includes(id));

    const all = await pages(store, { limit: 7 });
    expect(all.records.map((r) => r.id)).toEqual(live);
    expect(all.examined.every((n) => n <= 7)).toBe(true);
    expect(all.examined.reduce((a, b) => a + b, 0)).toBe(live.length);
    // pages of 7 rows, the expired ones among them
    expect(all.examined).toHaveLength(Math.floor(rows.length / 7) + 1);

    // The claims in progress: a page reads only rows in progress (the expired ones among them), so
    // there are as many pages as those rows fill.
    const inProgress = rows.filter((r) => r.state === 'in_progress').map((r) => r.id);
    expect(inProgress).toHaveLength(ids.held.length + ids.expiredHeld.length);
    const held = await pages(store, { state: 'in_progress', limit: 4 });
    expect(held.records.map((r) => r.id)).toEqual([...ids.held].sort((a, b) => live.indexOf(a) - live.indexOf(b)));
    expect(held.examined).toHaveLength(Math.floor(inProgress.length / 4) + 1);
    expect(held.examined.reduce((a, b) => a + b, 0)).toBe(ids.held.length);
    expect(held.records.every((r) => r.state === 'in_progress' && r.lockTtl === 60_000)).toBe(true);

    // Filters apply to the page read: the name, and a state other than in progress.
    const charges = await pages(store, { name: 'payments.charge', state: 'completed', limit: 9 });
    expect(charges.records.map((r) => r.id)).toEqual(
      live.filter((id) => id.includes(':payments.charge:') && ids.done.includes(id)),
    );
    expect(charges.examined.reduce((a, b) => a + b, 0)).toBe(charges.records.length);
    expect(charges.examined).toHaveLength(Math.floor(rows.length / 9) + 1);

    // What the CLI's stuck and stats read, page by page.
    const operator = idempotencyAdmin({ store, pageSize: 5 });
    const stats = await operator.stats();
    expect(stats).toMatchObject({ complete: true, examined: live.length });
    expect(stats.byState).toEqual({ in_progress: ids.held.length, completed: ids.done.length, failed: 36 });
    const stuck = await operator.stuck({ olderThan: 0 });
    expect(stuck).toMatchObject({ complete: true, examined: ids.held.length });
    expect(stuck.records.map((r) => r.id).sort()).toEqual([...ids.held].sort());
    // --max bounds the rows read: the first 12, of which the live ones are examined
    const capped = await operator.stats({ max: 12 });
    expect(capped).toMatchObject({
      complete: false,
      examined: rows.slice(0, 12).filter((r) => live.includes(r.id)).length,
    });
  });

  it('costs one statement per page, inspect and forget one each', async () => {
    await clear();
    const store = storeOf();
    const id = recordId('u1', 'op', 'k');
    await claimWithSteps(store, id, { lockTtl: 60_000 });
    log.length = 0;
    await store.admin.inspect({ id, body: true });
    expect(log).toHaveLength(1);
    log.length = 0;
    await store.admin.list({ limit: 10 });
    await store.admin.list({ state: 'in_progress', name: 'op', olderThan: 0, limit: 10 });
    expect(log).toHaveLength(2);
    log.length = 0;
    expect(await store.admin.forget({ id, state: 'in_progress', token: 'a', steps: true })).toBe(true);
    expect(log).toHaveLength(1);
  });

  it('refuses a limit that is not a whole number above 0', async () => {
    const store = storeOf();
    await expect(store.admin.list({ limit: 0 })).rejects.toThrow(/limit must be a whole number from 1/);
    await expect(store.admin.list({ limit: 2.5 })).rejects.toThrow(/limit must be a whole number from 1/);
  });
});

describe('the claims in progress, through their partial index', () => {
  it('the in-progress page reads idempotency_keys_in_progress_idx, the full listing the primary key (generic plans, as prepared)', async () => {
    const client = await pgs.pool.connect();
    try {
      await client.query('begin');
      // 20,000 rows, 1% in progress: enough that the planner's choice does not hang on a small table's costs.
      await client.query(`insert into idempotency_keys (id, state, fingerprint, token, body, expires_at, created_at)
        select ':explain:' || lpad(g::text, 6, '0'), case when g % 100 = 0 then 'in_progress' else 'completed' end,
               'fp', 't', case when g % 100 = 0 then null else 'body' end, now() + interval '1 hour', now()
          from generate_series(1, 20000) g`);
      await client.query('analyze idempotency_keys');
      await client.query(`set local plan_cache_mode = force_generic_plan`);
      const plan = async (text: string) => {
        await client.query(`prepare admin_page (text, int, text, text, float8) as ${text}`);
        const { rows } = await client.query(`explain execute admin_page('', 1000, null, null, null)`);
        await client.query('deallocate admin_page');
        return rows.map((r: { 'QUERY PLAN': string }) => r['QUERY PLAN']).join('\n');
      };
      const stuck = await plan(LIST_IN_PROGRESS.text);
      expect(stuck).toMatch(/Index Scan using idempotency_keys_in_progress_idx on idempotency_keys/);
      expect(stuck).not.toMatch(/Seq Scan|Sort/);
      const everything = await plan(LIST.text);
      expect(everything).toMatch(/Index Scan using idempotency_keys_pkey on idempotency_keys/);
      expect(everything).not.toMatch(/Seq Scan|Sort/);
      await client.query('rollback');
    } finally {
      client.release();
    }
  });
});

describe('what the table keeps for operators', () => {
  it('a row without lock_ttl (written before migration 0002) has no lockTtl: the operator cannot tell if its holder lives', async () => {
    await clear();
    const store = storeOf();
    const id = recordId('u1', 'payments.charge', 'old');
    await store.claim({ id, fingerprint: 'fp', token: 'old', lockTtl: 60_000 });
    await pgs.pool.query('update idempotency_keys set lock_ttl = null where id = $1', [id]);
    const info = await store.admin.inspect({ id });
    expect(info).toMatchObject({ state: 'in_progress', token: 'old' });
    expect(info.lockTtl).toBeUndefined();
    expect(info.claimedAt).toBeTypeOf('number');
    const operator = idempotencyAdmin({ store });
    const inspected = await operator.inspect({ id });
    expect(inspected.live).toBeUndefined();
    expect(inspected.renewedAt).toBeUndefined();
    expect(await operator.release({ id }, { confirm: true })).toMatchObject({ done: false, reason: 'live' });
    expect(await operator.release({ id }, { force: true })).toMatchObject({ done: true });
    // A renewal records the lease again.
    await store.claim({ id, fingerprint: 'fp', token: 'new', lockTtl: 60_000 });
    await pgs.pool.query('update idempotency_keys set lock_ttl = null where id = $1', [id]);
    expect(await store.extend({ id, token: 'new', lockTtl: 30_000, fingerprint: 'fp' })).toBe(true);
    expect((await store.admin.inspect({ id })).lockTtl).toBe(30_000);
  });

  it('a lease too long for lock_ttl (an integer) is kept as unknown, the claim unchanged', async () => {
    await clear();
    const store = storeOf();
    const id = recordId('u1', 'op', 'long');
    expect(await store.claim({ id, fingerprint: 'fp', token: 'a', lockTtl: 3_000_000_000 })).toMatchObject({
      state: 'acquired',
    });
    const info = await store.admin.inspect({ id });
    expect(info.lockTtl).toBeUndefined();
    expect(info.expiresAt! - info.time).toBeGreaterThan(2_999_000_000);
  });

  it('claimedAt is the claim that holds the row: a takeover of an expired row resets it, the same claim sent again and its completion keep it', async () => {
    await clear();
    const store = storeOf();
    const id = recordId('u1', 'op', 'takeover');
    await store.claim({ id, fingerprint: 'fp', token: 'first', lockTtl: 50 });
    const first = await store.admin.inspect({ id });
    await sleep(120); // real time: PostgreSQL's clock must pass the 50 ms claim
    await store.claim({ id, fingerprint: 'fp', token: 'second', lockTtl: 60_000 });
    const second = await store.admin.inspect({ id });
    expect(second).toMatchObject({ token: 'second', lockTtl: 60_000 });
    expect(second.claimedAt! - first.claimedAt!).toBeGreaterThanOrEqual(100);

    await sleep(20); // real time: PostgreSQL's clock must move, or a kept claimedAt proves nothing
    await store.claim({ id, fingerprint: 'fp', token: 'second', lockTtl: 40_000 });
    const again = await store.admin.inspect({ id });
    expect(again).toMatchObject({ token: 'second', lockTtl: 40_000, claimedAt: second.claimedAt });

    await sleep(20); // real time, as above
    await store.complete({ id, fingerprint: 'fp', token: 'second', state: 'completed', body: '1', ttl: 60_000 });
    const done = await store.admin.inspect({ id });
    expect(done).toMatchObject({ state: 'completed', claimedAt: second.claimedAt });
    expect(done.lockTtl).toBeUndefined();
    const { rows } = await pgs.pool.query('select lock_ttl from idempotency_keys where id = $1', [id]);
    expect(rows).toEqual([{ lock_ttl: null }]);
  });

  it('sizes are the UTF-8 bytes of what was stored, also for a body kept encoded (NUL) and a large one (TOAST)', async () => {
    await clear();
    const store = storeOf();
    const nul = recordId(undefined, 'op', 'nul');
    const large = recordId(undefined, 'op', 'large');
    const nulBody = '"a\u0000é"';
    const largeBody = JSON.stringify({ data: Array.from({ length: 20_000 }, (_, i) => `é${i}`) });
    for (const [id, body] of [
      [nul, nulBody],
      [large, largeBody],
    ] as const) {
      await store.claim({ id, fingerprint: 'fp', token: 'a', lockTtl: 10_000 });
      await store.complete({ id, fingerprint: 'fp', token: 'a', state: 'completed', body, ttl: 60_000 });
      await claimWithSteps(store, `${id}-steps`, { steps: [{ name: 'one', body }] });
      const info = await store.admin.inspect({ id, body: true });
      expect(info).toMatchObject({ bytes: Buffer.byteLength(body), body });
      expect((await store.admin.inspect({ id: `${id}-steps` })).steps).toEqual([
        { name: 'one', bytes: Buffer.byteLength(body) },
      ]);
    }
    const listed = await store.admin.list({ state: 'completed' });
    expect(listed.records.map((r) => [r.id, r.bytes])).toEqual(
      [
        [large, Buffer.byteLength(largeBody)],
        [nul, Buffer.byteLength(nulBody)],
      ].sort(),
    );
  });

  it('forget deletes nothing expired, and steps alone only when no live row holds the key', async () => {
    await clear();
    const store = storeOf();
    const id = recordId('u1', 'op', 'expired');
    await store.claim({ id, fingerprint: 'fp', token: 'a', lockTtl: 30 });
    await sleep(60); // real time: PostgreSQL's clock must pass the 30 ms claim
    expect(await store.admin.forget({ id, state: 'in_progress', token: 'a' })).toBe(false);
    const { rows } = await pgs.pool.query('select 1 from idempotency_keys where id = $1', [id]);
    expect(rows).toHaveLength(1);

    const held = recordId('u1', 'op', 'held');
    await claimWithSteps(store, held, { lockTtl: 60_000 });
    expect(await store.admin.forget({ id: held, state: 'absent', steps: true })).toBe(false);
    expect((await store.admin.inspect({ id: held })).steps).toEqual([{ name: 's', bytes: 1 }]);
  });
});

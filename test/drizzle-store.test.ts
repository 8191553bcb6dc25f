/**
 * The PostgreSQL store: the contract on a real server (node-postgres) and on
 * PGlite, then what only PostgreSQL has: purge and transactional mode.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { drizzleStore } from '../src/drizzle.js';
import { describeStoreContract } from './contract/store-contract.js';
import { isolatedSchema, type PgSchema, pgliteDb } from './helpers/postgres.js';
import { sleep } from './helpers/redis.js';

let server: PgSchema;
let lite: Awaited<ReturnType<typeof pgliteDb>>;
beforeAll(async () => {
  [server, lite] = await Promise.all([isolatedSchema('contract'), pgliteDb()]);
});
afterAll(async () => {
  await server?.drop();
  await lite?.close();
});

describeStoreContract('postgres (node-postgres)', () => ({ store: drizzleStore({ db: server.db }), advance: sleep }), { notifies: false });
describeStoreContract('postgres (PGlite)', () => ({ store: drizzleStore({ db: lite.db }), advance: sleep }), { notifies: false });

describe('purgeExpired', () => {
  it('deletes expired rows in batches and leaves live claims and outcomes alone', async () => {
    const schema = await isolatedSchema('purge');
    try {
      const store = drizzleStore({ db: schema.db });
      for (let i = 0; i < 3; i++) {
        await store.claim({ id: `done-${i}`, fingerprint: 'fp', token: `t${i}`, lockTtl: 60_000 });
        await store.complete({ fingerprint: 'fp', id: `done-${i}`, token: `t${i}`, state: 'completed', body: 'kept', ttl: 60_000 });
      }
      for (let i = 0; i < 2; i++) await store.claim({ id: `running-${i}`, fingerprint: 'fp', token: 'r', lockTtl: 60_000 });
      for (let i = 0; i < 5; i++) {
        await store.claim({ id: `stale-${i}`, fingerprint: 'fp', token: 's', lockTtl: 200 });
        if (i % 2 === 0) await store.complete({ fingerprint: 'fp', id: `stale-${i}`, token: 's', state: 'completed', body: 'old', ttl: 200 });
      }
      await sleep(300);
      expect(await store.purgeExpired({ batchSize: 2, maxBatches: 1 })).toBe(2);
      expect(await store.purgeExpired({ batchSize: 2 })).toBe(3);
      expect(await store.purgeExpired()).toBe(0);
      const { rows } = await schema.pool.query<{ id: string; state: string }>('select id, state from idempotency_keys order by id');
      expect(rows.map((r) => r.id)).toEqual(['done-0', 'done-1', 'done-2', 'running-0', 'running-1']);
      expect(await store.claim({ id: 'running-0', fingerprint: 'fp', token: 'x', lockTtl: 1_000 })).toEqual({ state: 'in_progress', fingerprint: 'fp' });
      expect(await store.claim({ id: 'done-1', fingerprint: 'fp', token: 'x', lockTtl: 1_000 })).toMatchObject({ state: 'completed', body: 'kept' });
      await expect(store.purgeExpired({ batchSize: 0 })).rejects.toThrow(/batchSize must be a positive integer/);
    } finally {
      await schema.drop();
    }
  });

  it('can find expired rows through the index on expires_at', async () => {
    // A small table is scanned whole; forbidding that shows the index serves the purge's query.
    const client = await server.pool.connect();
    try {
      await client.query('begin');
      await client.query('set local enable_seqscan = off');
      const { rows } = await client.query(
        'explain select id from idempotency_keys where expires_at <= statement_timestamp() order by expires_at limit 1000 for update skip locked',
      );
      await client.query('rollback');
      expect(rows.map((r: { 'QUERY PLAN': string }) => r['QUERY PLAN']).join('\n')).toMatch(/Index Scan (using|on) idempotency_keys_expires_at_idx/);
    } finally {
      client.release();
    }
  });
});

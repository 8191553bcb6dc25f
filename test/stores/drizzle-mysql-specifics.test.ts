/**
 * What only the MySQL/MariaDB store has, beyond the shared contracts
 * (drizzle-mysql.test.ts): byte-exact ids, purge, transactional mode on a
 * pool (and its refusal on one connection), lock waits as contention, and the
 * migrations (migrateIdempotencyKeys) under concurrent callers.
 */
import { randomUUID } from 'node:crypto';
import { initTRPC, TRPCError } from '@trpc/server';
import { count, eq } from 'drizzle-orm';
import { int, mysqlTable, serial, varchar } from 'drizzle-orm/mysql-core';
import { drizzle } from 'drizzle-orm/mysql2';
import mysql from 'mysql2/promise';
import { afterAll, afterEach, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import { storeFailureKind } from '../../src/core/idempotency-error.js';
import { recordId } from '../../src/core.js';
import { drizzleStore, type MySqlDrizzleStore, migrateIdempotencyKeys } from '../../src/drizzle.js';
import { type IdempotencyMeta, idempotencyErrorFormatter, withIdempotency } from '../../src/index.js';
import { isolatedDatabase, MYSQL_MIGRATIONS, type MysqlDatabase } from '../helpers/mysql.js';
import { startPipe } from '../helpers/proxy.js';
import { sleep } from '../helpers/redis.js';
import { createClient, rejectionOf, startServer, type TestServer } from '../helpers/trpc.js';

let my: MysqlDatabase;
beforeAll(async () => {
  my = await isolatedDatabase('specifics');
  await my.pool.query(
    'create table charges (id serial primary key, idem_key varchar(64) not null, amount int not null) engine=InnoDB',
  );
}, 60_000);
afterAll(async () => {
  await my?.drop();
});

describe('record identity on MySQL', () => {
  it('ids differing only in case or trailing spaces are records of their own (binary columns, no collation)', async () => {
    const store = drizzleStore({ db: my.db });
    const base = `scope:op:${randomUUID()}`;
    const ids = [`${base}k`, `${base}K`, `${base}k `, `${base}k  `];
    for (const [i, id] of ids.entries()) {
      expect(await store.claim({ id, fingerprint: 'fp', token: `t${i}`, lockTtl: 10_000 })).toMatchObject({
        state: 'acquired',
      });
      expect(
        await store.complete({ id, fingerprint: 'fp', token: `t${i}`, state: 'completed', body: `${i}`, ttl: 60_000 }),
      ).toBe('stored');
    }
    for (const [i, id] of ids.entries()) {
      expect(await store.claim({ id, fingerprint: 'fp', token: 'x', lockTtl: 10_000 })).toMatchObject({ body: `${i}` });
    }
  });

  it('refuses an id longer than the table holds, saying what to shorten', async () => {
    const store = drizzleStore({ db: my.db });
    await expect(store.claim({ id: 'x'.repeat(3001), fingerprint: 'fp', token: 't', lockTtl: 1_000 })).rejects.toThrow(
      /record id of 3001 bytes does not fit the MySQL table's id \(at most 3000 bytes\)/,
    );
  });
});

describe('claims on MySQL', () => {
  it('a claim is taken as of the time it answers: the claim time, and the lease from it (the read before the write)', async () => {
    // The claim reads, then writes: both the claim time and the lease start at the read's time, which the answer
    // gives (the model-based suite found them a few ms apart when the write took the time of its own).
    const store = drizzleStore({ db: my.db });
    for (let i = 0; i < 20; i++) {
      const id = `time:${randomUUID()}`;
      const claim = await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 5_000 });
      const info = await store.admin.inspect({ id });
      expect(info).toMatchObject({ claimedAt: claim.time, expiresAt: claim.time! + 5_000 });
    }
  });
});

describe('a claim between its read and its write (two statements)', () => {
  it('a key taken, given a step and released meanwhile is resumed after that step: the step does not run twice', async () => {
    // Claimer A's connection goes through a gate that holds the statement taking the absent key (A's insert)
    // until B has claimed the key, recorded step 0 and released it: A's read found no steps, and its insert
    // finds the key absent again. A must start after step 0, as B's release left it to the next holder.
    let reachedInsert!: () => void;
    const reached = new Promise<void>((resolve) => {
      reachedInsert = resolve;
    });
    let held: Buffer[] | undefined;
    let upstreamOfA: { write(chunk: Buffer): unknown } | undefined;
    const gate = await startPipe({ port: Number(new URL(my.url).port) }, (_client, upstream) => ({
      fromClient(chunk) {
        if (held === undefined && chunk.includes('insert into idempotency_keys')) {
          held = [chunk];
          upstreamOfA = upstream;
          reachedInsert();
        } else if (held !== undefined && upstream === upstreamOfA && held.length > 0) held.push(chunk);
        else upstream.write(chunk);
      },
    }));
    const url = new URL(my.url);
    url.port = String(gate.port);
    const connection = await mysql.createConnection(url.toString());
    try {
      const a = drizzleStore({ db: drizzle(connection) });
      const b = drizzleStore({ db: my.db });
      const id = `aba:${randomUUID()}`;
      const claimOfA = a.claim({ id, fingerprint: 'fp', token: 'a', lockTtl: 10_000 });
      await reached;
      expect(await b.claim({ id, fingerprint: 'fp', token: 'b', lockTtl: 10_000 })).toMatchObject({
        state: 'acquired',
      });
      const step = {
        id,
        token: 'b',
        fingerprint: 'fp',
        index: 0,
        name: 'charge',
        body: '"ch_1"',
        ttl: 60_000,
        lockTtl: 10_000,
      };
      expect(await b.saveStep!(step)).toBe('stored');
      expect(await b.release({ id, token: 'b' })).toBe(true);
      const pending = held!;
      held = [];
      for (const chunk of pending) upstreamOfA!.write(chunk);
      expect(await claimOfA).toMatchObject({
        state: 'acquired',
        steps: { fingerprint: 'fp', steps: [{ name: 'charge', body: '"ch_1"' }] },
      });
    } finally {
      await connection.end();
      await gate.close();
    }
  });
});

describe('purgeExpired on MySQL', () => {
  it('deletes expired rows and steps in batches and leaves live claims and outcomes alone', async () => {
    const store = drizzleStore({ db: my.db });
    const p = randomUUID();
    await store.claim({ id: `${p}:running`, fingerprint: 'fp', token: 'r', lockTtl: 60_000 });
    await store.claim({ id: `${p}:done`, fingerprint: 'fp', token: 'd', lockTtl: 60_000 });
    await store.complete({
      id: `${p}:done`,
      fingerprint: 'fp',
      token: 'd',
      state: 'completed',
      body: 'kept',
      ttl: 60_000,
    });
    // stale-0's claim lives until its step is saved (the save, right after it, is checked)
    await store.claim({ id: `${p}:stale-0`, fingerprint: 'fp', token: 's', lockTtl: 400 });
    const saved = await store.saveStep!({
      id: `${p}:stale-0`,
      token: 's',
      fingerprint: 'fp',
      index: 0,
      name: 'a',
      body: '1',
      ttl: 100,
      lockTtl: 400,
    });
    expect(saved).toBe('stored');
    for (let i = 1; i < 5; i++)
      await store.claim({ id: `${p}:stale-${i}`, fingerprint: 'fp', token: 's', lockTtl: 100 });
    await sleep(450); // real time: the server's clock must pass the 100 and 400 ms expiries
    const before = await my.pool.query(
      'select count(*) as n from idempotency_keys where expires_at <= utc_timestamp(3)',
    );
    const expired = Number((before[0] as { n: number }[])[0]!.n);
    expect(expired).toBeGreaterThanOrEqual(5);
    expect(await store.purgeExpired({ batchSize: 2, maxBatches: 1 })).toBe(2 + 1); // 2 rows, then the 1 step
    expect(await store.purgeExpired({ batchSize: 2 })).toBe(expired - 2);
    expect(await store.purgeExpired()).toBe(0);
    expect(await store.claim({ id: `${p}:running`, fingerprint: 'fp', token: 'x', lockTtl: 1_000 })).toMatchObject({
      state: 'in_progress',
    });
    expect(await store.claim({ id: `${p}:done`, fingerprint: 'fp', token: 'x', lockTtl: 1_000 })).toMatchObject({
      state: 'completed',
      body: 'kept',
    });
  });
});

describe('lock waits on MySQL', () => {
  it('a statement that waits out innodb_lock_wait_timeout on a row lock fails as contention', async () => {
    const pool = mysql.createPool({ uri: my.url, connectionLimit: 2 });
    pool.on('connection', (c) => void c.query('set session innodb_lock_wait_timeout = 1'));
    const store = drizzleStore({ db: drizzle(pool) });
    const locker = await my.pool.getConnection();
    try {
      const id = `lock:${randomUUID()}`;
      await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 60_000 });
      await locker.query('begin');
      await locker.query('select * from idempotency_keys where id = ? for update', [Buffer.from(id)]);
      const error = await store
        .complete({ id, fingerprint: 'fp', token: 't', state: 'completed', body: 'b', ttl: 1_000 })
        .catch((e: unknown) => e);
      expect(storeFailureKind(error)).toBe('contention');
      expect((error as Error).message).toMatch(/^drizzleStore: Lock wait timeout exceeded/);
      await locker.query('rollback');
      // once the lock is gone the holder completes
      expect(
        await store.complete({ id, fingerprint: 'fp', token: 't', state: 'completed', body: 'b', ttl: 1_000 }),
      ).toBe('stored');
    } finally {
      locker.release();
      await pool.end();
    }
  });

  it('a server that cannot be reached is unavailable, with no query or value in the message', async () => {
    const pool = mysql.createPool({ uri: 'mysql://root@127.0.0.1:1/test', connectionLimit: 1 });
    const store = drizzleStore({ db: drizzle(pool) });
    const error = await store
      .claim({ id: 'secret-key', fingerprint: 'fp', token: 't', lockTtl: 1_000 })
      .catch((e) => e);
    expect(storeFailureKind(error)).toBe('unavailable');
    expect((error as Error).message).not.toMatch(/secret-key|select/i);
    await pool.end();
  });
});

const charges = mysqlTable('charges', {
  id: serial('id').primaryKey(),
  idemKey: varchar('idem_key', { length: 64 }).notNull(),
  amount: int('amount').notNull(),
});

describe('transactional mode on MySQL', () => {
  const servers: TestServer[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => s.close()));
  });
  const chargesFor = async (key: string) =>
    (await my.db.select({ n: count() }).from(charges).where(eq(charges.idemKey, key)))[0]!.n;

  async function client(db: typeof my.db) {
    const store = drizzleStore({ db });
    const t = initTRPC.meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });
    const procedure = withIdempotency(t.procedure, { scope: 'global', store, lockTtl: 5_000 });
    const router = t.router({
      charge: procedure
        .meta({ idempotency: { transaction: true } })
        .input(z.object({ key: z.string(), amount: z.number(), fail: z.enum(['none', 'crash', 'decline']) }))
        .mutation(async ({ ctx, input }) => {
          const tx = store.transactionOf(ctx);
          const [{ insertId }] = await tx.insert(charges).values({ idemKey: input.key, amount: input.amount });
          if (input.fail === 'crash') throw new Error('card network reset the connection');
          if (input.fail === 'decline') throw new TRPCError({ code: 'PAYMENT_REQUIRED', message: 'Card declined' });
          return { chargeId: insertId };
        }),
    });
    const server = await startServer(router);
    servers.push(server);
    return createClient<typeof router>(server.url);
  }

  it('commits the business write with the stored outcome; a retry replays without writing again', async () => {
    const c = await client(my.db);
    const key = randomUUID();
    const first = await c.charge.mutate({ key, amount: 500, fail: 'none' }, { context: { key } });
    expect(await c.charge.mutate({ key, amount: 500, fail: 'none' }, { context: { key } })).toEqual(first);
    expect(await chargesFor(key)).toBe(1);
  });

  it('rolls the business write back on a 5xx and releases the key; the retry writes once', async () => {
    const c = await client(my.db);
    const key = randomUUID();
    const error = await rejectionOf(c.charge.mutate({ key, amount: 1, fail: 'crash' }, { context: { key } }));
    expect(error.data?.httpStatus).toBe(500);
    expect(await chargesFor(key)).toBe(0);
    await c.charge.mutate({ key, amount: 1, fail: 'none' }, { context: { key } });
    expect(await chargesFor(key)).toBe(1);
  });

  it('rolls the business write back on a 4xx and stores the error for replay', async () => {
    const c = await client(my.db);
    const key = randomUUID();
    expect(
      (await rejectionOf(c.charge.mutate({ key, amount: 1, fail: 'decline' }, { context: { key } }))).message,
    ).toBe('Card declined');
    const replay = await rejectionOf(c.charge.mutate({ key, amount: 1, fail: 'decline' }, { context: { key } }));
    expect(replay.data).toMatchObject({ httpStatus: 402, code: 'PAYMENT_REQUIRED' });
    expect(await chargesFor(key)).toBe(0);
  });

  it('is refused on a single connection, whose transaction would take in every other request’s queries', async () => {
    const store = drizzleStore({ db: await my.single() });
    expect(() => store.transaction!(async () => 1)).toThrow(/transactional mode needs a pool/);
  });
});

describe('migrateIdempotencyKeys on MySQL', () => {
  it('creates both tables once, whoever of several concurrent callers gets there first', async () => {
    const fresh = await isolatedDatabase('migrate', 10, false);
    try {
      const results = await Promise.all(Array.from({ length: 5 }, () => migrateIdempotencyKeys(fresh.db)));
      expect(results.map((r) => r.applied).sort()).toEqual([0, 0, 0, 0, 1]);
      expect(await migrateIdempotencyKeys(fresh.db, { migrationsFolder: MYSQL_MIGRATIONS })).toEqual({ applied: 0 });
      const [tables] = await fresh.pool.query('show tables');
      expect((tables as Record<string, string>[]).map((row) => Object.values(row)[0]).sort()).toEqual([
        '__trpc_idempotency_migrations',
        'idempotency_keys',
        'idempotency_steps',
      ]);
      // the store runs on what they made
      const store = drizzleStore({ db: fresh.db });
      expect((await store.claim({ id: 'a:b:c', fingerprint: 'fp', token: 't', lockTtl: 1_000 })).state).toBe(
        'acquired',
      );
    } finally {
      await fresh.drop();
    }
  });

  it('refuses a transaction, PostgreSQL-only options, and a folder that is not drizzle/mysql', async () => {
    await my.db.transaction(async (tx) => {
      await expect(migrateIdempotencyKeys(tx)).rejects.toThrow(
        /pass the database \(drizzle\(pool\)\), not a transaction/,
      );
    });
    await expect(migrateIdempotencyKeys(my.db, { migrationsSchema: 'x' })).rejects.toThrow(
      /`migrationsSchema` is not an option on MySQL/,
    );
    await expect(
      migrateIdempotencyKeys(my.db, { migrationsFolder: new URL('../../drizzle', import.meta.url) }),
    ).rejects.toThrow(/is not trpc-idempotency's migrations folder, or not of this version/);
  });

  it('one drizzleStore for both dialects: the type of what it returns follows the database', () => {
    const store = drizzleStore({ db: my.db });
    expect(store.name).toBe('mysql');
    expectTypeOf(store.name).toEqualTypeOf<'mysql'>();
    expectTypeOf(store).toEqualTypeOf<MySqlDrizzleStore<typeof my.db>>();
    // transactionOf() is the mysql2 transaction of that database
    expectTypeOf(store.transactionOf).returns.toHaveProperty('insert');
  });

  it('a store refuses what is not a Drizzle database, naming every dialect', () => {
    expect(() => drizzleStore({ db: {} as never })).toThrow(
      /PostgreSQL database .*, MySQL database .* or SQLite database/,
    );
  });
});

describe('claims under contention on MySQL', () => {
  it('200 concurrent claims of one key on a pool of 10: one takes it, the others see it held, none fails', async () => {
    const store = drizzleStore({ db: my.db });
    const id = recordId('u', 'contended', randomUUID());
    const answers = await Promise.all(
      Array.from({ length: 200 }, (_, i) => store.claim({ id, fingerprint: 'fp', token: `t${i}`, lockTtl: 30_000 })),
    );
    const states = answers.map((a) => a.state);
    expect(states.filter((s) => s === 'acquired')).toHaveLength(1);
    expect(states.filter((s) => s === 'in_progress')).toHaveLength(199);
  });
});

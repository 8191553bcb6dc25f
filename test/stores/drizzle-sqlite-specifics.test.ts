/**
 * What only the SQLite store has, beyond the shared contracts
 * (drizzle-sqlite.test.ts): transactional mode on libSQL (and its refusal on
 * better-sqlite3, and of steps inside it), the write lock not had within
 * busy_timeout as contention, its connection's pragmas left as they are, and
 * the migrations under concurrent callers.
 */
import { randomUUID } from 'node:crypto';
import { initTRPC, TRPCError } from '@trpc/server';
import Database from 'better-sqlite3';
import { count, eq } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/better-sqlite3';
import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { afterAll, afterEach, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import { storeFailureKind } from '../../src/core/idempotency-error.js';
import { drizzleStore, migrateIdempotencyKeys, type SQLiteDrizzleStore } from '../../src/drizzle.js';
import { type IdempotencyMeta, idempotencyErrorFormatter, steps, withIdempotency } from '../../src/index.js';
import { type SqliteFile, sqliteFile } from '../helpers/sqlite.js';
import { createClient, rejectionOf, startServer, type TestServer } from '../helpers/trpc.js';

let file: SqliteFile;
beforeAll(async () => {
  file = await sqliteFile('specifics');
  file.better().run('create table charges (id integer primary key, idem_key text not null, amount integer not null)');
});
afterAll(() => file?.drop());

const charges = sqliteTable('charges', {
  id: integer('id').primaryKey(),
  idemKey: text('idem_key').notNull(),
  amount: integer('amount').notNull(),
});

describe('transactional mode on libSQL', () => {
  const servers: TestServer[] = [];
  const refused: unknown[] = [];
  /** The ids of the claims sent to the store. */
  const claimed: string[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => s.close()));
  });
  const chargesFor = async (key: string) =>
    (await file.libsql().select({ n: count() }).from(charges).where(eq(charges.idemKey, key)))[0]!.n;

  async function client() {
    const store = drizzleStore({ db: file.libsql() });
    // what the store answered to each save of a step (the engine reports a failed save as step_unrecorded)
    const saveStep = store.saveStep!.bind(store);
    store.saveStep = (input) =>
      saveStep(input).catch((error: unknown) => {
        refused.push(error);
        throw error;
      });
    const claim = store.claim.bind(store);
    store.claim = (input) => {
      claimed.push(input.id);
      return claim(input);
    };
    const t = initTRPC.meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });
    const procedure = withIdempotency(t.procedure, { scope: 'global', store, lockTtl: 5_000 });
    let release: (() => void) | undefined;
    const router = t.router({
      charge: procedure
        .meta({ idempotency: { transaction: true } })
        .input(z.object({ key: z.string(), amount: z.number(), fail: z.enum(['none', 'crash', 'decline', 'hold']) }))
        .mutation(async ({ ctx, input }) => {
          const tx = store.transactionOf(ctx);
          const [row] = await tx.insert(charges).values({ idemKey: input.key, amount: input.amount }).returning();
          if (input.fail === 'crash') throw new Error('card network reset the connection');
          if (input.fail === 'decline') throw new TRPCError({ code: 'PAYMENT_REQUIRED', message: 'Card declined' });
          if (input.fail === 'hold') await new Promise<void>((resolve) => (release = resolve));
          return { chargeId: row!.id };
        }),
      plain: procedure.input(z.object({ key: z.string() })).mutation(({ input }) => ({ key: input.key })),
      stepped: procedure
        .meta({ idempotency: { transaction: true } })
        .input(z.object({ key: z.string() }))
        .mutation(async (opts) => steps(opts).step('reserve', async () => 1)),
    });
    const server = await startServer(router);
    servers.push(server);
    return { c: createClient<typeof router>(server.url), release: () => release?.() };
  }

  it('commits the business write with the stored outcome; a retry replays without writing again', async () => {
    const { c } = await client();
    const key = randomUUID();
    const first = await c.charge.mutate({ key, amount: 500, fail: 'none' }, { context: { key } });
    expect(await c.charge.mutate({ key, amount: 500, fail: 'none' }, { context: { key } })).toEqual(first);
    expect(await chargesFor(key)).toBe(1);
  });

  it('rolls the business write back on a 5xx and releases the key; on a 4xx stores the error for replay', async () => {
    const { c } = await client();
    const key = randomUUID();
    expect(
      (await rejectionOf(c.charge.mutate({ key, amount: 1, fail: 'crash' }, { context: { key } }))).data,
    ).toMatchObject({ httpStatus: 500 });
    expect(await chargesFor(key)).toBe(0);
    await c.charge.mutate({ key, amount: 1, fail: 'none' }, { context: { key } });
    expect(await chargesFor(key)).toBe(1);
    const declined = randomUUID();
    await rejectionOf(c.charge.mutate({ key: declined, amount: 1, fail: 'decline' }, { context: { key: declined } }));
    const replay = await rejectionOf(
      c.charge.mutate({ key: declined, amount: 1, fail: 'decline' }, { context: { key: declined } }),
    );
    expect(replay.data).toMatchObject({ httpStatus: 402, code: 'PAYMENT_REQUIRED' });
    expect(await chargesFor(declined)).toBe(0);
  });

  it('holds the write lock while the procedure runs: the process’s other requests wait for it, without blocking it', async () => {
    const { c, release } = await client();
    const key = randomUUID();
    const held = c.charge.mutate({ key, amount: 7, fail: 'hold' }, { context: { key } });
    await expect
      .poll(() => file.better().select({ n: count() }).from(charges).where(eq(charges.idemKey, key)).get()?.n)
      .toBe(0);
    let plainDone = false;
    const other = randomUUID();
    const plain = c.plain.mutate({ key: other }, { context: { key: other } }).then((r) => {
      plainDone = true;
      return r;
    });
    // The other request's claim reached the store, and waits there for the transaction (had it waited on the
    // file's lock instead, it would block this process, this poll included, until busy_timeout, then fail).
    await expect.poll(() => claimed.some((id) => id.endsWith(other))).toBe(true);
    expect(plainDone).toBe(false);
    release();
    expect(await held).toMatchObject({ chargeId: expect.any(Number) });
    expect(await plain).toEqual({ key: other });
    expect(await chargesFor(key)).toBe(1);
  });

  it('refuses steps in a transactional procedure (the step’s write would wait for the transaction’s lock)', async () => {
    const { c } = await client();
    const key = randomUUID();
    const error = await rejectionOf(c.stepped.mutate({ key }, { context: { key } }));
    expect(error.message).toMatch(/^Step "reserve" completed, but/);
    expect(refused).toHaveLength(1);
    expect(String(refused[0])).toMatch(/cannot record steps on SQLite/);
  });
});

describe('the SQLite store on better-sqlite3', () => {
  it('refuses transactional mode: better-sqlite3’s transactions are synchronous', () => {
    const store = drizzleStore({ db: file.better() });
    expect(store.name).toBe('sqlite');
    expectTypeOf(store).toEqualTypeOf<SQLiteDrizzleStore<ReturnType<SqliteFile['better']>>>();
    expect(() => store.transaction!(async () => 1)).toThrow(/needs an asynchronous SQLite driver/);
  });

  it('answers contention when another connection holds the write lock past busy_timeout, and changes no pragma', async () => {
    const holder = new Database(file.path);
    const impatient = new Database(file.path, { timeout: 50 });
    try {
      impatient.pragma('synchronous = FULL');
      const store = drizzleStore({ db: drizzle(impatient) });
      const id = `:busy:${randomUUID()}`;
      holder.prepare('begin immediate').run();
      const error = await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 1_000 }).catch((e: unknown) => e);
      expect(storeFailureKind(error)).toBe('contention');
      expect(String(error)).toMatch(/database is locked/);
      holder.prepare('rollback').run();
      expect(await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 1_000 })).toMatchObject({
        state: 'acquired',
      });
      expect(impatient.pragma('synchronous', { simple: true })).toBe(2);
      expect(impatient.pragma('busy_timeout', { simple: true })).toBe(50);
    } finally {
      holder.close();
      impatient.close();
    }
  });

  it('purges expired rows and steps in batches', async () => {
    const store = drizzleStore({ db: file.better() });
    for (let i = 0; i < 5; i++) {
      const id = `:purge:${randomUUID()}`;
      await store.claim({ id, fingerprint: 'fp', token: 't', lockTtl: 1 });
      await store.saveStep!({ id, token: 't', fingerprint: 'fp', index: 0, name: 's', body: '1', ttl: 1, lockTtl: 1 });
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect(await store.purgeExpired({ batchSize: 2 })).toBeGreaterThanOrEqual(5);
    expect(await store.purgeExpired()).toBe(0);
  });
});

describe('migrateIdempotencyKeys on SQLite', () => {
  // Several processes starting together on a fresh file: test/engine/sqlite-pods.test.ts (each pod migrates).
  it('applies the migrations once, then finds them applied, on either driver', async () => {
    const fresh = await sqliteFile('migrate', false);
    try {
      expect(await migrateIdempotencyKeys(fresh.libsql())).toEqual({ applied: 1 });
      expect(await migrateIdempotencyKeys(fresh.better())).toEqual({ applied: 0 });
      const store = drizzleStore({ db: fresh.libsql() });
      expect(await store.claim({ id: ':m:1', fingerprint: 'fp', token: 't', lockTtl: 1_000 })).toMatchObject({
        state: 'acquired',
      });
    } finally {
      fresh.drop();
    }
  });

  it('refuses a transaction, and options of other dialects', async () => {
    await expect(migrateIdempotencyKeys(file.better(), { migrationsSchema: 'x' } as never)).rejects.toThrow(
      /is not an option on SQLite/,
    );
    const db = file.libsql();
    await db.transaction(async (tx) => {
      await expect(migrateIdempotencyKeys(tx)).rejects.toThrow(/not a transaction/);
    });
  });
});

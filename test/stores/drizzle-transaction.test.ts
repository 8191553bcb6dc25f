/**
 * Transactional mode on a real PostgreSQL: the procedure's own writes and
 * its stored outcome commit together or not at all. Crashes of a real
 * process are in postgres-pods.test.ts.
 */
import { randomUUID } from 'node:crypto';
import { initTRPC, TRPCError } from '@trpc/server';
import { count, eq } from 'drizzle-orm';
import { integer, pgTable, serial, text } from 'drizzle-orm/pg-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { recordId } from '../../src/core.js';
import { drizzleStore } from '../../src/drizzle.js';
import {
  createIdempotencyEngine,
  type IdempotencyEvent,
  type IdempotencyMeta,
  idempotencyErrorFormatter,
  memoryStore,
  withIdempotency,
} from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import { isolatedSchema, type PgSchema } from '../helpers/postgres.js';
import { deadRedis } from '../helpers/redis.js';
import { createClient, rejectionOf, startServer, type TestServer } from '../helpers/trpc.js';

const charges = pgTable('charges', {
  id: serial('id').primaryKey(),
  idemKey: text('idem_key').notNull(),
  amount: integer('amount').notNull(),
  reference: text('reference'),
});

let pgs: PgSchema;
beforeAll(async () => {
  pgs = await isolatedSchema('tx');
  // `reference` is unique, checked at commit: a way to make a commit fail.
  await pgs.pool.query(`create table charges (id serial primary key, idem_key text not null, amount int not null,
    reference text, constraint charges_reference_key unique (reference) deferrable initially deferred)`);
});
afterAll(async () => {
  await pgs?.drop();
});
const servers: TestServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

async function chargesFor(key: string) {
  const [row] = await pgs.db.select({ n: count() }).from(charges).where(eq(charges.idemKey, key));
  return row!.n;
}

function app(events: IdempotencyEvent[] = []) {
  const store = drizzleStore({ db: pgs.db });
  const t = initTRPC.meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });
  const idempotentProcedure = withIdempotency(t.procedure, {
    scope: 'global',
    store,
    onEvent: (e) => events.push(e),
    lockTtl: 5_000,
  });
  const input = z.object({
    key: z.string(),
    amount: z.number(),
    fail: z.enum(['none', 'crash', 'decline', 'commit', 'stolen']).default('none'),
  });
  const router = t.router({
    charge: idempotentProcedure
      .meta({ idempotency: { transaction: true } })
      .input(input)
      .mutation(async ({ ctx, input }) => {
        const tx = store.transactionOf(ctx);
        const [row] = await tx
          .insert(charges)
          .values({ idemKey: input.key, amount: input.amount, reference: input.fail === 'commit' ? 'duplicate' : null })
          .returning();
        if (input.fail === 'commit')
          await tx.insert(charges).values({ idemKey: input.key, amount: 0, reference: 'duplicate' });
        if (input.fail === 'crash') throw new Error('card network reset the connection');
        if (input.fail === 'decline') throw new TRPCError({ code: 'PAYMENT_REQUIRED', message: 'Card declined' });
        if (input.fail === 'stolen') {
          // the claim expires and another request takes the key over while this one runs
          await pgs.pool.query(`update idempotency_keys set expires_at = now() - interval '1 second' where id = $1`, [
            recordId(undefined, 'charge', input.key),
          ]);
          await store.claim({
            id: recordId(undefined, 'charge', input.key),
            fingerprint: 'other',
            token: 'thief',
            lockTtl: 60_000,
          });
        }
        return { chargeId: row!.id, amount: row!.amount };
      }),
    untransacted: idempotentProcedure.mutation(({ ctx }) => {
      store.transactionOf(ctx);
      return 1;
    }),
  });
  return { router, store };
}

async function client(events?: IdempotencyEvent[]) {
  const { router } = app(events);
  const server = await startServer(router);
  servers.push(server);
  return createClient<typeof router>(server.url);
}

describe('transactional mode', () => {
  it('commits the business write with the stored outcome; a retry replays without writing again', async () => {
    const c = await client();
    const key = randomUUID();
    const first = await c.charge.mutate({ key, amount: 500 }, { context: { key } });
    const replay = await c.charge.mutate({ key, amount: 500 }, { context: { key } });
    expect(replay).toEqual(first);
    expect(await chargesFor(key)).toBe(1);
  });

  it('rolls the business write back on a 5xx and releases the key; the retry writes once', async () => {
    const c = await client();
    const key = randomUUID();
    expect(
      (await rejectionOf(c.charge.mutate({ key, amount: 1, fail: 'crash' }, { context: { key } }))).data?.httpStatus,
    ).toBe(500);
    expect(await chargesFor(key)).toBe(0);
    // the key was released, so a new attempt with it runs (this time the card network answers)
    await c.charge.mutate({ key, amount: 1, fail: 'none' }, { context: { key } });
    expect(await chargesFor(key)).toBe(1);
  });

  it('rolls the business write back on a 4xx and stores the error for replay', async () => {
    const c = await client();
    const key = randomUUID();
    const first = await rejectionOf(c.charge.mutate({ key, amount: 1, fail: 'decline' }, { context: { key } }));
    const replay = await rejectionOf(c.charge.mutate({ key, amount: 1, fail: 'decline' }, { context: { key } }));
    expect(first.message).toBe('Card declined');
    expect(replay.data).toMatchObject({ httpStatus: 402, code: 'PAYMENT_REQUIRED' });
    expect(await chargesFor(key)).toBe(0);
  });

  it('releases the key when the commit itself fails, leaving nothing written', async () => {
    const events: IdempotencyEvent[] = [];
    const c = await client(events);
    const key = randomUUID();
    const error = await rejectionOf(c.charge.mutate({ key, amount: 1, fail: 'commit' }, { context: { key } }));
    expect(error.data?.httpStatus).toBe(500);
    expect(error.message).toMatch(/Failed query: commit/);
    expect(await chargesFor(key)).toBe(0);
    expect(events.map((e) => [e.result, e.reason])).toContainEqual(['released', 'error']);
    await c.charge.mutate({ key, amount: 1, fail: 'commit' }, { context: { key } }).catch(() => {});
    expect(events.filter((e) => e.result === 'acquired')).toHaveLength(2);
  });

  it('rolls back a holder whose claim was taken over while it ran: the fence holds inside the transaction', async () => {
    const events: IdempotencyEvent[] = [];
    const c = await client(events);
    const key = randomUUID();
    const error = await rejectionOf(c.charge.mutate({ key, amount: 9, fail: 'stolen' }, { context: { key } }));
    expect(error.data).toMatchObject({ httpStatus: 409, idempotency: { reason: 'in_progress' } });
    expect(await chargesFor(key)).toBe(0);
    expect(events.filter((e) => e.result === 'lease_lost').map((e) => e.reason)).toEqual(['fenced']);
    // the record is still the thief's live claim (its fingerprint), not the fenced holder's outcome
    const probe = { id: recordId(undefined, 'charge', key), fingerprint: 'probe', token: 'probe', lockTtl: 1_000 };
    expect(await drizzleStore({ db: pgs.db }).claim(probe)).toMatchObject({
      state: 'in_progress',
      fingerprint: 'other',
    });
  });

  it('tells a procedure that asks for the transaction outside transactional mode what to change', async () => {
    const c = await client();
    const error = await rejectionOf(c.untransacted.mutate(undefined, { context: { key: randomUUID() } }));
    expect(error.message).toMatch(/does not run in transactional mode. Set `transaction: true`/);
  });

  it('refuses transaction: true with a store that has no transactions, when the procedure is defined', () => {
    expect(() => createIdempotencyEngine({ store: memoryStore(), transaction: true })).toThrow(
      /needs a store with transactions/,
    );
    const t = initTRPC.meta<IdempotencyMeta>().create();
    expect(() =>
      withIdempotency(t.procedure, { scope: 'global', store: memoryStore() })
        .meta({ idempotency: { transaction: true } })
        .mutation(() => 1),
    ).toThrow(/meta.idempotency: transaction: true needs a store with transactions/);
  });

  it('works outside tRPC: the operation gets the transaction', async () => {
    const store = drizzleStore({ db: pgs.db });
    const engine = createIdempotencyEngine({ store, transaction: true });
    const key = randomUUID();
    const handle = () =>
      engine.run({ key, name: 'webhook', payload: { event: key } }, async ({ transaction }) => {
        const tx = transaction as typeof pgs.db;
        const [row] = await tx.insert(charges).values({ idemKey: key, amount: 42 }).returning();
        return row!.id;
      });
    const first = await handle();
    expect(await handle()).toEqual({ value: first.value, replayed: true });
    expect(await chargesFor(key)).toBe(1);
  });
});

/**
 * A run nested in a transactional run (a mutation run without a key through a caller from its
 * resolver, or an engine that runs its operation unprotected) must not see the outer transaction: its writes would
 * commit or roll back with another operation's outcome.
 */
describe('a run nested in a transactional run does not see its transaction', () => {
  /** 'tx' when `transactionOf` answered the outer transaction, else what it threw. */
  function transactionSeen(store: ReturnType<typeof drizzleStore>, ctx?: object): string {
    try {
      store.transactionOf(ctx);
      return 'tx';
    } catch (error) {
      return (error as Error).name;
    }
  }

  interface NestedCaller {
    unkeyedProbe(): Promise<string>;
  }

  function nestingApp() {
    const store = drizzleStore({ db: pgs.db });
    let createCaller: (ctx: object) => NestedCaller = () => {
      throw new Error('called before the router was made');
    };
    const t = initTRPC.meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });
    const idempotent = withIdempotency(t.procedure, { scope: 'global', store, lockTtl: 5_000 });
    const router = t.router({
      outer: idempotent.meta({ idempotency: { transaction: true } }).mutation(async ({ ctx }) => {
        const outerSees = transactionSeen(store, ctx);
        // The nested call's context carries no key: an optional mutation then runs without one.
        const caller = createCaller({ req: { headers: {} } });
        const nestedSees = await caller.unkeyedProbe();
        return { outerSees, nestedSees };
      }),
      unkeyedProbe: idempotent
        .meta({ idempotency: { required: false } })
        .mutation(({ ctx }) => transactionSeen(store, ctx)),
    });
    createCaller = t.createCallerFactory(router);
    return router;
  }

  it('a mutation without a key called from the resolver of a transactional mutation', async () => {
    const server = await startServer(nestingApp());
    servers.push(server);
    const trpc = createClient<ReturnType<typeof nestingApp>>(server.url);
    expect(await trpc.outer.mutate(undefined, { context: { key: randomUUID() } })).toEqual({
      outerSees: 'tx',
      nestedSees: 'IdempotencyConfigError',
    });
  });

  it('an operation another engine runs unprotected (fail-open, its store down) inside a transactional run', async () => {
    const store = drizzleStore({ db: pgs.db });
    const outer = createIdempotencyEngine({ store, transaction: true });
    const down = deadRedis(); // a real client to a port nothing listens on
    const inner = createIdempotencyEngine({ store: redisStore({ client: down }), onStoreError: 'fail-open' });
    try {
      const { value } = await outer.run({ key: randomUUID(), name: 'outer', payload: {} }, async () => {
        const outerSees = transactionSeen(store);
        const nested = await inner.run({ key: randomUUID(), name: 'inner', payload: {} }, async () =>
          transactionSeen(store),
        );
        return { outerSees, innerSees: nested.value, innerReplayed: nested.replayed };
      });
      expect(value).toEqual({ outerSees: 'tx', innerSees: 'IdempotencyConfigError', innerReplayed: false });
    } finally {
      down.disconnect();
    }
  });
});

/**
 * The payments service: a tRPC router protected by trpc-idempotency.
 */
import { initTRPC, TRPCError } from '@trpc/server';
import type { CreateHTTPContextOptions } from '@trpc/server/adapters/standalone';
import { and, desc, eq, sql } from 'drizzle-orm';
import { Redis } from 'ioredis';
import {
  type IdempotencyEvent,
  type IdempotencyMeta,
  type IdempotencyStore,
  idempotencyErrorFormatter,
  memoryStore,
  steps,
  withIdempotency,
} from 'trpc-idempotency';
import { drizzleStore, type TransactionOf } from 'trpc-idempotency/drizzle';
import { openTelemetry } from 'trpc-idempotency/otel';
import { redisStore } from 'trpc-idempotency/redis';
import { z } from 'zod';
import type { Db } from './db.js';
import { openIdempotencyDatabase } from './idempotency-db.js';
import { type ProviderCharge, providerClient } from './provider.js';
import { charges, refunds } from './schema.js';

export type StoreKind = 'memory' | 'redis' | 'postgres' | 'mysql' | 'sqlite';

export interface AppOptions {
  db: Db;
  /** Which idempotency store: the embedded memory store, Redis, the business database, or a MySQL or SQLite one of its own. */
  store: StoreKind;
  redisUrl?: string;
  /** The MySQL or SQLite store's database (see idempotency-db.ts). */
  idempotencyDatabaseUrl?: string;
  /** Key prefix in Redis, so several deployments can share one server. */
  redisPrefix?: string;
  instanceId: string;
  /** The card provider's base URL (see provider.ts). */
  providerUrl: string;
  /** How long a charge takes at the "card network", in ms. */
  chargeDelayMs: number;
  /** The claim's lifetime, in ms. */
  lockTtl: number;
  onEvent?: (event: IdempotencyEvent & { instance: string }) => void;
  /**
   * The demo's crash: called after a payment whose request asked for it (header
   * `x-demo-crash: after-charge`) ran and recorded its charge step, before the
   * ledger write. It ends the process. Left out, the header is ignored.
   */
  crashAfterCharge?: () => never;
}

export function createContext({ req, res }: CreateHTTPContextOptions) {
  // A real service authenticates here; the demo trusts a header so you can play two users.
  const userId = String(req.headers['x-user'] ?? 'demo-user');
  const crashAfterCharge = req.headers['x-demo-crash'] === 'after-charge';
  return { req, res, userId, crashAfterCharge };
}
type Context = ReturnType<typeof createContext>;

export async function createApp(options: AppOptions) {
  const { db, instanceId, chargeDelayMs } = options;
  const provider = providerClient(options.providerUrl);

  let store: IdempotencyStore;
  let redis: Redis | undefined;
  let closeStore = async () => {};
  let storeWhere: string | undefined;
  const postgres = options.store === 'postgres' ? drizzleStore({ db }) : undefined;
  if (postgres !== undefined) {
    store = postgres;
  } else if (options.store === 'mysql' || options.store === 'sqlite') {
    const opened = await openIdempotencyDatabase(options.store, options.idempotencyDatabaseUrl);
    store = opened.store;
    closeStore = opened.close;
    storeWhere = opened.where;
  } else if (options.store === 'redis') {
    redis = new Redis(options.redisUrl ?? 'redis://127.0.0.1:6379');
    // ioredis reconnects by itself; while it cannot, requests get 503 (fail-closed).
    redis.on('error', (error) =>
      console.error(JSON.stringify({ event: 'redis_error', instance: instanceId, message: error.message })),
    );
    store = redisStore({ client: redis, prefix: options.redisPrefix ?? 'payments:idem:' });
  } else {
    store = memoryStore();
  }

  // isDev: false: error bodies keep their message, code and idempotency reason but carry no stack
  // (tRPC adds one, with the server's file paths, whenever NODE_ENV is not 'production').
  const t = initTRPC
    .context<Context>()
    .meta<IdempotencyMeta>()
    .create({ isDev: false, errorFormatter: idempotencyErrorFormatter });
  const idempotentProcedure = withIdempotency(t.procedure, {
    store,
    lockTtl: options.lockTtl,
    // Keys are per user: one user's key can never replay another's charge.
    scope: ({ ctx }) => ctx.userId,
    // Metrics and spans through OpenTelemetry (served on /metrics), then our own log line.
    onEvent: openTelemetry({ onEvent: (event) => options.onEvent?.({ ...event, instance: instanceId }) }),
  });
  // With the PostgreSQL store the ledger row and the stored response commit together.
  const transaction = postgres !== undefined;
  const ledger = () => (postgres !== undefined ? postgres.transactionOf() : db);
  // A transaction for a check and the write it guards: the call's own with the PostgreSQL
  // store (transactional mode), a new one on the database with the others.
  const inTransaction = <T>(fn: (tx: TransactionOf<Db>) => Promise<T>): Promise<T> =>
    postgres !== undefined ? fn(postgres.transactionOf()) : db.transaction(fn);

  const appRouter = t.router({
    payments: t.router({
      create: idempotentProcedure
        .meta({ idempotency: { excludeFields: ['clientTimestamp'], transaction } })
        .input(
          z.object({
            /** In cents (the currency's minor unit): 1000 is 10.00 EUR. */
            amount: z.number().int().positive().max(1_000_000),
            currency: z.enum(['EUR', 'USD', 'GBP']),
            /** When the client sent it: changes on every retry, so it is left out of the fingerprint. */
            clientTimestamp: z.number().optional(),
          }),
        )
        .mutation(async (opts) => {
          const { input, ctx } = opts;
          const { step } = steps(opts);
          // The charge at the provider is a recovery point: once it is recorded, a retry after a
          // crash (on any instance) gets this charge back instead of charging again. The provider
          // call carries the step's derived key, so a crash inside the call is deduplicated there.
          let ran = false;
          const charged = await step('charge', async ({ key }): Promise<ProviderCharge & { instance: string }> => {
            ran = true;
            await new Promise((resolve) => setTimeout(resolve, chargeDelayMs)); // the card network
            try {
              return { ...(await provider.charge(input, key)), instance: instanceId };
            } catch (error) {
              throw new TRPCError({ code: 'BAD_GATEWAY', message: (error as Error).message, cause: error });
            }
          });
          // Only the attempt that charged crashes: a retry that resumed the step goes on.
          if (ran && ctx.crashAfterCharge) options.crashAfterCharge?.();
          const [charge] = await ledger()
            .insert(charges)
            .values({
              userId: ctx.userId,
              amount: input.amount,
              currency: input.currency,
              instance: instanceId,
              providerChargeId: charged.id,
            })
            .returning();
          return {
            ...charge!,
            /** The provider's charge, and the instance whose attempt made it. */
            provider: { id: charged.id, key: charged.key, instance: charged.instance },
            /** The steps this execution ran, and those it took over from an attempt that did not finish. */
            steps: { ran: ran ? ['charge'] : [], resumed: ran ? [] : ['charge'] },
          };
        }),

      // Refunds are kept a week and a duplicate waits for the first one instead of getting 409.
      refund: idempotentProcedure
        .meta({ idempotency: { ttl: 7 * 24 * 3_600_000, inFlight: 'wait', waitTimeout: 15_000, transaction } })
        .input(z.object({ chargeId: z.number().int(), amount: z.number().int().positive() }))
        .mutation(({ input, ctx }) =>
          inTransaction(async (tx) => {
            // Lock the charge: concurrent refunds of it (other keys, other instances) take turns
            // from here to the commit, so each one sees the refunds before it.
            const [charge] = await tx
              .select()
              .from(charges)
              .where(and(eq(charges.id, input.chargeId), eq(charges.userId, ctx.userId)))
              .for('update');
            if (charge === undefined) {
              throw new TRPCError({ code: 'NOT_FOUND', message: `No charge ${input.chargeId} for you.` });
            }
            const [earlier] = await tx
              .select({ sum: sql<number>`coalesce(sum(${refunds.amount}), 0)::int`.mapWith(Number) })
              .from(refunds)
              .where(eq(refunds.chargeId, charge.id));
            const left = charge.amount - earlier!.sum;
            if (input.amount > left) {
              throw new TRPCError({
                code: 'BAD_REQUEST',
                message: `Cannot refund ${input.amount}: only ${left} of the ${charge.amount} charged is left to refund.`,
              });
            }
            await new Promise((resolve) => setTimeout(resolve, chargeDelayMs)); // the card network
            const [refund] = await tx
              .insert(refunds)
              .values({ chargeId: charge.id, amount: input.amount, instance: instanceId })
              .returning();
            return refund!;
          }),
        ),

      list: t.procedure.query(({ ctx }) =>
        db.select().from(charges).where(eq(charges.userId, ctx.userId)).orderBy(desc(charges.id)).limit(100),
      ),
    }),
  });

  return {
    appRouter,
    /** Where a MySQL or SQLite store is, for the banner. */
    storeWhere,
    close: async () => {
      redis?.disconnect();
      await closeStore();
    },
  };
}

export type AppRouter = Awaited<ReturnType<typeof createApp>>['appRouter'];

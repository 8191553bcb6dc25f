/**
 * The router docs/adapters.md's bun.ts and deno.ts serve (in a folder of their own) through its
 * fetch.ts: the same procedures as ../router.ts, on the store STORE names, made as docs/stores.md
 * makes it: `memory` (the default store), `redis` (ioredis), `node-redis`, or `postgres` (pg and
 * drizzle-orm, its table migrated first, in the schema PG_SCHEMA). `process.env` is Bun's and Deno's.
 */
import { randomUUID } from 'node:crypto';
import { initTRPC } from '@trpc/server';
import { type IdempotencyStore, idempotencyErrorFormatter, withIdempotency } from 'trpc-idempotency';
import { z } from 'zod';

const { STORE = 'memory', REDIS_URL = 'redis://127.0.0.1:6379', DATABASE_URL, PG_SCHEMA, PREFIX } = process.env;

async function storeOf(kind: string): Promise<IdempotencyStore | undefined> {
  const prefix = PREFIX ?? `stacks-runtimes:${randomUUID()}:`;
  switch (kind) {
    case 'memory':
      return undefined;
    case 'redis': {
      const { Redis } = await import('ioredis');
      const { redisStore } = await import('trpc-idempotency/redis');
      return redisStore({ client: new Redis(REDIS_URL), prefix });
    }
    case 'node-redis': {
      const { createClient } = await import('redis');
      const { redisStore } = await import('trpc-idempotency/redis');
      const client = createClient({ url: REDIS_URL });
      await client.connect();
      return redisStore({ client, prefix });
    }
    case 'postgres': {
      const { default: pg } = await import('pg');
      const { drizzle } = await import('drizzle-orm/node-postgres');
      const { drizzleStore, migrateIdempotencyKeys } = await import('trpc-idempotency/drizzle');
      const db = drizzle(new pg.Pool({ connectionString: DATABASE_URL, options: `-c search_path=${PG_SCHEMA}` }));
      await migrateIdempotencyKeys(db, { migrationsSchema: PG_SCHEMA });
      return drizzleStore({ db });
    }
    default:
      throw new Error(`STORE=${kind}: memory, redis, node-redis or postgres`);
  }
}

const store = await storeOf(STORE);
let executions = 0;
const held = new Map<string, () => void>();

const t = initTRPC.create({ errorFormatter: idempotencyErrorFormatter });
const idempotentProcedure = withIdempotency(t.procedure, {
  scope: 'global',
  ttl: 60_000,
  ...(store === undefined ? {} : { store }),
});

export const appRouter = t.router({
  pay: idempotentProcedure.input(z.object({ amount: z.number().int().positive() })).mutation(({ input }) => {
    executions++;
    return { chargeId: randomUUID(), amount: input.amount };
  }),
  hold: idempotentProcedure.input(z.object({ id: z.string() })).mutation(async ({ input }) => {
    executions++;
    await new Promise<void>((resolve) => held.set(input.id, resolve));
    return { held: input.id };
  }),
  release: t.procedure.input(z.object({ id: z.string() })).mutation(({ input }) => {
    const resolve = held.get(input.id);
    held.delete(input.id);
    resolve?.();
    return resolve !== undefined;
  }),
  stats: t.procedure.query(() => ({ executions, holding: [...held.keys()], store: STORE })),
});
export type AppRouter = typeof appRouter;

/**
 * The router docs/workers.md's worker.ts serves inside workerd (through docs/adapters.md's fetch.ts),
 * for workers.test.ts: the same procedures as ../adapters/router.ts on the default store, the memory
 * store of this isolate, and what the test asks of the runtime: whether it gave AsyncLocalStorage
 * (nodejs_compat) and whether `node:` modules were reachable at all. No `process.env`, no top-level
 * I/O: a Worker's global scope may not set timers or make random values.
 */
import { initTRPC } from '@trpc/server';
import {
  createIdempotencyEngine,
  type IdempotencyStore,
  idempotencyErrorFormatter,
  memoryStore,
  withIdempotency,
} from 'trpc-idempotency';
import { z } from 'zod';

let executions = 0;
const held = new Map<string, () => void>();

const t = initTRPC.create({ errorFormatter: idempotencyErrorFormatter });
const idempotentProcedure = withIdempotency(t.procedure, { scope: 'global' });

/** What the runtime offers of Node's modules, as #platform's web.ts looks for them. */
function runtime(): { nodeModules: boolean; asyncLocalStorage: boolean } {
  const { process } = globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } };
  const hooks = process?.getBuiltinModule?.('node:async_hooks') as { AsyncLocalStorage?: unknown } | undefined;
  return {
    nodeModules: typeof process?.getBuiltinModule === 'function',
    asyncLocalStorage: !!hooks?.AsyncLocalStorage,
  };
}

export const appRouter = t.router({
  pay: idempotentProcedure.input(z.object({ amount: z.number().int().positive() })).mutation(({ input }) => {
    executions++;
    return { chargeId: crypto.randomUUID(), amount: input.amount };
  }),
  // Held until `release`, which another request calls: the held request stays alive meanwhile by the
  // renewal timer of its own claim (#platform's EntryTimers), or workerd would cancel it as hung.
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
  stats: t.procedure.query(() => ({ executions, holding: [...held.keys()], ...runtime() })),
  // An engine in transactional mode, on a store that has transactions (never run): refused where the
  // runtime has no AsyncLocalStorage, through which the store would find the run's transaction.
  transactional: t.procedure.query(() => {
    const transaction = (() => Promise.reject(new Error('not run'))) as NonNullable<IdempotencyStore['transaction']>;
    try {
      createIdempotencyEngine({ store: Object.assign(memoryStore(), { transaction }), transaction: true });
      return { refused: null };
    } catch (error) {
      return { refused: `${(error as Error).name}: ${(error as Error).message}` };
    }
  }),
});
export type AppRouter = typeof appRouter;

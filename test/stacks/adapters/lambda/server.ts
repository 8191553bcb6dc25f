/**
 * docs/lambda.md's server.ts, as the test serves it (lambda/server.ts, beside
 * the page's context.ts and handler.ts): the page's context, the memory store
 * instead of Redis (one process), and the scenario's procedures.
 */
import { initTRPC } from '@trpc/server';
import type { TRPCRequestInfo } from '@trpc/server/http';
import { type IdempotencyMeta, idempotencyErrorFormatter, withIdempotency } from 'trpc-idempotency';
import { z } from 'zod';
import { hold, pay, release, stats } from '../router.js';

/**
 * docs/lambda.md's `Context` (its context.ts), which handler.ts's createContext returns and responseMeta
 * takes: should the page change it, the project's tsc fails here.
 */
type Context = {
  headers: Record<string, string | string[] | undefined>;
  info: TRPCRequestInfo;
  resHeaders: Headers;
};

const t = initTRPC.context<Context>().meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });
const idempotentProcedure = withIdempotency(t.procedure, { scope: 'global' });

export const appRouter = t.router({
  pay: idempotentProcedure
    .input(z.object({ amount: z.number().int().positive() }))
    .mutation(({ input }) => pay(input.amount)),
  hold: idempotentProcedure.input(z.object({ id: z.string() })).mutation(({ input }) => hold(input.id)),
  release: t.procedure.input(z.object({ id: z.string() })).mutation(({ input }) => release(input.id)),
  stats: t.procedure.query(() => stats()),
});
export type AppRouter = typeof appRouter;

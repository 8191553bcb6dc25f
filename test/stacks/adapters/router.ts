/**
 * The router docs/adapters.md's adapter snippets import (`./router.js`), as the
 * test serves it: the page's `pay`, context-free as the page's, and what the
 * scenario needs besides: a mutation held open until released (a request
 * still running when its duplicate comes, for the 409) and the count of
 * executions. No relative import: Next.js's bundler would not map `.js` to `.ts`.
 */
import { randomUUID } from 'node:crypto';
import { initTRPC } from '@trpc/server';
import { idempotencyErrorFormatter, withIdempotency } from 'trpc-idempotency';
import { z } from 'zod';

let executions = 0;
const held = new Map<string, () => void>();

export function pay(amount: number): { chargeId: string; amount: number } {
  executions++;
  return { chargeId: randomUUID(), amount };
}

/** Runs until `release(id)`. */
export async function hold(id: string): Promise<{ held: string }> {
  executions++;
  await new Promise<void>((resolve) => held.set(id, resolve));
  return { held: id };
}

export function release(id: string): boolean {
  const resolve = held.get(id);
  held.delete(id);
  resolve?.();
  return resolve !== undefined;
}

export function stats(): { executions: number; holding: string[] } {
  return { executions, holding: [...held.keys()] };
}

const t = initTRPC.create({ errorFormatter: idempotencyErrorFormatter });
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

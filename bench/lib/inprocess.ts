/**
 * The in-process measurements' router (overhead.ts, profile-inprocess.ts): the bench's mutation
 * without idempotency (`plain`) and with it (`idempotent`: memory store, key from the context),
 * called through server-side callers, so no HTTP is measured.
 */
import { initTRPC } from '@trpc/server';
import { memoryStore, withIdempotency } from '../../dist/index.js';
import { type PayInput, parsePayInput } from './app.js';

export interface InProcessCtx {
  key: string;
}

export const INPUT: PayInput = { amount: 4200, currency: 'eur' };

const t = initTRPC.context<InProcessCtx>().create();
const idempotent = withIdempotency(t.procedure, { store: memoryStore(), getKey: ({ ctx }) => ctx.key });
const resolve = ({ input }: { input: PayInput }) => ({
  id: 'pay_1234567',
  amount: input.amount,
  currency: input.currency,
  status: 'succeeded',
  created: 1_700_001_234_567,
  description: 'Benchmark payment: one Redis INCR per call; this text pads the result to about two hundred bytes.',
});
const router = t.router({
  plain: t.procedure.input(parsePayInput).mutation(resolve),
  idempotent: idempotent.input(parsePayInput).mutation(resolve),
});

/** A caller on one context object: change `ctx.key` between calls to give each its own key. */
export const callerFor = t.createCallerFactory(router);

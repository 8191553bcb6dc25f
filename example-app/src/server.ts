/**
 * A small payments service protected by trpc-idempotency.
 * `npm run demo` starts it with the embedded memory store; nothing else to run.
 *
 * env: PORT (3000), INSTANCE_ID (demo-1), REDIS_URL (use the Redis store instead of memory)
 */
import { randomUUID } from 'node:crypto';
import { initTRPC } from '@trpc/server';
import { createHTTPServer, type CreateHTTPContextOptions } from '@trpc/server/adapters/standalone';
import { idempotencyErrorFormatter, type IdempotencyMeta, type IdempotencyStore, memoryStore, withIdempotency } from 'trpc-idempotency';
import { z } from 'zod';

const port = Number(process.env.PORT ?? 3000);
const instance = process.env.INSTANCE_ID ?? 'demo-1';

async function chooseStore(): Promise<IdempotencyStore> {
  if (!process.env.REDIS_URL) return memoryStore();
  const [{ Redis }, { redisStore }] = await Promise.all([import('ioredis'), import('trpc-idempotency/redis')]);
  return redisStore({ client: new Redis(process.env.REDIS_URL) });
}

const createContext = ({ req, res }: CreateHTTPContextOptions) => {
  res.setHeader('x-instance-id', instance);
  // A real service authenticates; the demo trusts a header so you can play two users.
  return { req, res, userId: String(req.headers['x-user'] ?? 'demo-user') };
};

const t = initTRPC
  .context<Awaited<ReturnType<typeof createContext>>>()
  .meta<IdempotencyMeta>()
  .create({ errorFormatter: idempotencyErrorFormatter });

const idempotentProcedure = withIdempotency(t.procedure, {
  store: await chooseStore(),
  scope: ({ ctx }) => ctx.userId,
  onEvent: (e) => console.log(JSON.stringify({ event: 'idempotency', instance, ...e })),
});

interface Charge {
  id: string;
  userId: string;
  amount: number;
  currency: string;
  instance: string;
  createdAt: string;
}
const ledger: Charge[] = [];

const appRouter = t.router({
  payments: t.router({
    create: idempotentProcedure
      .meta({ idempotency: { excludeFields: ['clientTimestamp'] } })
      .input(
        z.object({
          amount: z.number().int().positive(),
          currency: z.enum(['EUR', 'USD', 'GBP']),
          clientTimestamp: z.number().optional(),
        }),
      )
      .mutation(async ({ input, ctx }) => {
        await new Promise((resolve) => setTimeout(resolve, 1_500)); // the card network is slow
        const charge: Charge = {
          id: `ch_${randomUUID().slice(0, 8)}`,
          userId: ctx.userId,
          amount: input.amount,
          currency: input.currency,
          instance,
          createdAt: new Date().toISOString(),
        };
        ledger.push(charge);
        return charge;
      }),
    list: t.procedure.query(({ ctx }) => ledger.filter((c) => c.userId === ctx.userId)),
  }),
});
export type AppRouter = typeof appRouter;

createHTTPServer({ router: appRouter, createContext }).listen(port, () => {
  const url = `http://localhost:${port}`;
  const post = (key: string, body: string) =>
    `curl -si -X POST ${url}/payments.create -H 'content-type: application/json' -H 'idempotency-key: ${key}' -d '${body}'`;
  console.log(`trpc-idempotency demo (instance ${instance}) listening on ${url}
store: ${process.env.REDIS_URL ? `redis at ${process.env.REDIS_URL}` : 'memory'}

First call, runs the charge (1.5 s):
  ${post('order-1', '{"amount":1000,"currency":"EUR","clientTimestamp":1}')}
Same key again, replayed without charging (header idempotent-replayed: true; clientTimestamp is excluded):
  ${post('order-1', '{"amount":1000,"currency":"EUR","clientTimestamp":2}')}
Same key, another amount: 422
  ${post('order-1', '{"amount":5000,"currency":"EUR"}')}
Two at once with a new key: one charges, the other gets 409 with Retry-After
  ${post('order-2', '{"amount":700,"currency":"EUR"}')} & ${post('order-2', '{"amount":700,"currency":"EUR"}')}; wait
No key: 400
  curl -si -X POST ${url}/payments.create -H 'content-type: application/json' -d '{"amount":1000,"currency":"EUR"}'
The ledger:
  curl -s ${url}/payments.list
`);
});

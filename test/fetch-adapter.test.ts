/**
 * The fetch adapter (Next.js app router, Hono, Bun, Deno, edge runtimes):
 * the key comes from `req`, replay headers go to `resHeaders`.
 */
import { randomUUID } from 'node:crypto';
import { initTRPC } from '@trpc/server';
import { type FetchCreateContextFnOptions, fetchRequestHandler } from '@trpc/server/adapters/fetch';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { idempotencyErrorFormatter, type IdempotencyMeta, memoryStore, withIdempotency } from '../src/index.js';

const t = initTRPC.meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });
let runs = 0;
const router = t.router({
  pay: withIdempotency(t.procedure, { store: memoryStore() })
    .input(z.object({ amount: z.number() }))
    .mutation(({ input }) => ({ run: ++runs, amount: input.amount })),
});

function call(headers: Record<string, string>, body: unknown) {
  return fetchRequestHandler({
    endpoint: '/trpc',
    router,
    req: new Request('http://localhost/trpc/pay', { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) }),
    createContext: ({ req, resHeaders }: FetchCreateContextFnOptions) => ({ req, resHeaders }),
  });
}

describe('fetch adapter', () => {
  it('reads the key from the Request and marks replays in resHeaders', async () => {
    const key = randomUUID();
    const first = await call({ 'Idempotency-Key': key }, { amount: 3 });
    const replay = await call({ 'Idempotency-Key': key }, { amount: 3 });
    expect(first.status).toBe(200);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.json()).toEqual(await first.json());
    expect(runs).toBe(1);

    const missing = await call({}, { amount: 3 });
    expect(missing.status).toBe(400);
    const mismatch = await call({ 'Idempotency-Key': key }, { amount: 4 });
    expect(mismatch.status).toBe(422);
    expect(((await mismatch.json()) as { error: { data: unknown } }).error.data).toMatchObject({ idempotency: { reason: 'payload_mismatch' } });
  });
});

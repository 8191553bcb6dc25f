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

/** `headers` as a list of pairs appends each one, so a name can be sent twice. */
function call(headers: Record<string, string> | [string, string][], body: unknown) {
  const all = new Headers({ 'content-type': 'application/json' });
  for (const [name, value] of Array.isArray(headers) ? headers : Object.entries(headers)) all.append(name, value);
  return fetchRequestHandler({
    endpoint: '/trpc',
    router,
    req: new Request('http://localhost/trpc/pay', { method: 'POST', headers: all, body: JSON.stringify(body) }),
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

  it('refuses Idempotency-Key sent twice (Headers joins the values with ", "): 400 key_invalid, nothing runs or is stored', async () => {
    const before = runs;
    const refused = await call(
      [
        ['Idempotency-Key', 'one'],
        ['Idempotency-Key', 'two'],
      ],
      { amount: 3 },
    );
    expect(refused.status).toBe(400);
    const { error } = (await refused.json()) as { error: { message: string; data: unknown } };
    expect(error.data).toMatchObject({ code: 'BAD_REQUEST', idempotency: { reason: 'key_invalid' } });
    expect(error.message).toMatch(/Idempotency-Key header holds more than one value.*send it once per call/);
    expect(runs).toBe(before);
    // no record under "one, two": that key, sent once and quoted, runs now and then replays
    const quoted = await call({ 'Idempotency-Key': '"one, two"' }, { amount: 3 });
    const replay = await call({ 'Idempotency-Key': '"one, two"' }, { amount: 3 });
    expect(quoted.status).toBe(200);
    expect(quoted.headers.get('idempotent-replayed')).toBeNull();
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await replay.json()).toEqual(await quoted.json());
    expect(runs).toBe(before + 1);
  });

  it('refuses an unquoted value with a comma, and a list of quoted strings', async () => {
    const before = runs;
    for (const value of ['a,b', '"a", "b"']) {
      const refused = await call({ 'Idempotency-Key': value }, { amount: 3 });
      expect(refused.status).toBe(400);
      expect(((await refused.json()) as { error: { data: unknown } }).error.data).toMatchObject({ idempotency: { reason: 'key_invalid' } });
    }
    expect(runs).toBe(before);
  });
});

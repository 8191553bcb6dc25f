/**
 * The fetch adapter (Next.js app router, Hono, Bun, Deno, edge runtimes):
 * the key comes from `req`, replay headers go to `resHeaders`.
 */
import { randomUUID } from 'node:crypto';
import { initTRPC } from '@trpc/server';
import { type FetchCreateContextFnOptions, fetchRequestHandler } from '@trpc/server/adapters/fetch';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type IdempotencyMeta, idempotencyErrorFormatter, memoryStore, withIdempotency } from '../../src/index.js';

const t = initTRPC.meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });
let runs = 0;
const router = t.router({
  pay: withIdempotency(t.procedure, { scope: 'global', store: memoryStore() })
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
    expect(((await mismatch.json()) as { error: { data: unknown } }).error.data).toMatchObject({
      idempotency: { reason: 'payload_mismatch' },
    });
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
      expect(((await refused.json()) as { error: { data: unknown } }).error.data).toMatchObject({
        idempotency: { reason: 'key_invalid' },
      });
    }
    expect(runs).toBe(before);
  });
});

describe("a context of the request's headers only (create-t3-app's `createTRPCContext({ headers })`)", () => {
  const t3 = initTRPC.context<{ headers: Headers }>().create();
  let t3runs = 0;
  const t3router = t3.router({
    pay: withIdempotency(t3.procedure, { scope: 'global', store: memoryStore() })
      .input(z.object({ amount: z.number() }))
      .mutation(({ input }) => ({ run: ++t3runs, amount: input.amount })),
  });
  const post = (path: string, headers: Record<string, string>, body: unknown) => {
    const req = new Request(`http://localhost/api/trpc/${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    return fetchRequestHandler({
      endpoint: '/api/trpc',
      router: t3router,
      req,
      createContext: () => ({ headers: req.headers }),
    });
  };

  it("recognises batches from tRPC's batchIndex: each call reads its own Idempotency-Key-<i>", async () => {
    const keys = [randomUUID(), randomUUID(), randomUUID()];
    const headers = Object.fromEntries(keys.map((key, i) => [`Idempotency-Key-${i}`, key]));
    const body = { 0: { amount: 1 }, 1: { amount: 2 }, 2: { amount: 3 } };
    const first = await post('pay,pay,pay?batch=1', headers, body);
    expect(first.status).toBe(200);
    const firstRuns = ((await first.json()) as { result: { data: { run: number } } }[]).map((r) => r.result.data.run);
    const again = await post('pay,pay,pay?batch=1', headers, body);
    expect(((await again.json()) as { result: { data: { run: number } } }[]).map((r) => r.result.data.run)).toEqual(
      firstRuns,
    );
    expect(t3runs).toBe(3);
    // a single call reads the plain header
    const key = randomUUID();
    const single = await post('pay', { 'Idempotency-Key': key }, { amount: 4 });
    const singleAgain = await post('pay', { 'Idempotency-Key': key }, { amount: 4 });
    expect(await singleAgain.json()).toEqual(await single.json());
    expect(t3runs).toBe(4);
  });

  it('a batch call without its indexed key gets 400 naming the header to send; call 0 with two different keys too', async () => {
    const before = t3runs;
    const missing = await post(
      'pay,pay?batch=1',
      { 'Idempotency-Key': randomUUID() },
      { 0: { amount: 1 }, 1: { amount: 2 } },
    );
    const [zero, one] = (await missing.json()) as [{ result?: unknown }, { error: { message: string } }];
    expect(zero.result).toBeDefined();
    expect(one.error.message).toMatch(/This call is #1 of a batch: send Idempotency-Key-1/);
    const twoKeys = await post(
      'pay,pay?batch=1',
      { 'Idempotency-Key': 'a', 'Idempotency-Key-0': 'b', 'Idempotency-Key-1': randomUUID() },
      { 0: { amount: 1 }, 1: { amount: 2 } },
    );
    const [first] = (await twoKeys.json()) as [{ error: { message: string } }];
    expect(first.error.message).toMatch(/two different keys, in Idempotency-Key and Idempotency-Key-0/);
    expect(t3runs).toBe(before + 2); // call 0 of the first batch, call 1 of the second
  });
});

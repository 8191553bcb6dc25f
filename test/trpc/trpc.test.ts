/**
 * The tRPC adapter end to end: a real HTTP server and client per test.
 */
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { createTRPCClient, httpBatchStreamLink } from '@trpc/client';
import { initTRPC, TRPCError } from '@trpc/server';
import superjson from 'superjson';
import { afterEach, describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import { idempotencyHeaders, idempotencyLink } from '../../src/client.js';
import {
  IdempotencyConfigError,
  type IdempotencyEvent,
  type IdempotencyMeta,
  idempotencyErrorFormatter,
  memoryStore,
  retryable,
  type WithIdempotencyOptions,
  withIdempotency,
} from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import { watchedStore } from '../helpers/store-calls.js';
import { liveStores } from '../helpers/stores.js';
import { createClient, gate, listen, rejectionOf, type Seen, startServer, type TestServer } from '../helpers/trpc.js';

interface Ctx {
  user?: string;
}
const t = initTRPC.context<Ctx>().meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });

const servers: TestServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

async function serve<R extends Parameters<typeof startServer>[0]>(
  router: R,
  opts: { seen?: Seen; batch?: boolean; user?: string } = {},
) {
  const server = await startServer(router, ({ req }) => ({
    user: (req.headers['x-user'] as string | undefined) ?? opts.user,
  }));
  servers.push(server);
  return createClient<R>(server.url, { seen: opts.seen, batch: opts.batch });
}

const { stores, redis, prefix } = liveStores('trpc', ['memory', 'redis', 'postgres', 'mariadb']);

function idem(options: Partial<WithIdempotencyOptions<Ctx>> = {}) {
  return withIdempotency(t.procedure, { scope: 'global', store: memoryStore(), ...options });
}

describe('fingerprint', () => {
  it('ignores excluded fields at any depth, but not other changes', async () => {
    let runs = 0;
    const router = t.router({
      submit: idem()
        .meta({ idempotency: { excludeFields: ['clientTimestamp', 'nonce'] } })
        .input(
          z.object({
            amount: z.number(),
            clientTimestamp: z.number(),
            payer: z.object({
              id: z.string(),
              nonce: z.string(),
              devices: z.array(z.object({ nonce: z.string(), kind: z.string() })),
            }),
          }),
        )
        .mutation(() => ++runs),
    });
    const client = await serve(router);
    const key = randomUUID();
    const input = (ts: number, nonce: string, kind = 'phone') => ({
      amount: 10,
      clientTimestamp: ts,
      payer: { id: 'p1', nonce, devices: [{ nonce, kind }] },
    });
    expect(await client.submit.mutate(input(1, 'a'), { context: { key } })).toBe(1);
    expect(await client.submit.mutate(input(2, 'b'), { context: { key } })).toBe(1);
    const error = await rejectionOf(client.submit.mutate(input(3, 'c', 'laptop'), { context: { key } }));
    expect(error.data?.httpStatus).toBe(422);
    expect(runs).toBe(1);
  });

  it('does not depend on the order of keys in the input', async () => {
    let runs = 0;
    const router = t.router({
      tag: idem()
        .input(z.record(z.string(), z.number()))
        .mutation(({ input }) => ({ runs: ++runs, keys: Object.keys(input) })),
    });
    const client = await serve(router);
    const key = randomUUID();
    const first = await client.tag.mutate({ a: 1, b: 2, c: 3 }, { context: { key } });
    const second = await client.tag.mutate({ c: 3, a: 1, b: 2 }, { context: { key } });
    expect(second).toEqual(first);
    expect(runs).toBe(1);
  });

  it('sees the parsed input: a default filled in by zod matches an explicit value', async () => {
    let runs = 0;
    const router = t.router({
      pay: idem()
        .input(z.object({ amount: z.number(), currency: z.string().default('EUR') }))
        .mutation(() => ++runs),
    });
    const client = await serve(router);
    const key = randomUUID();
    await client.pay.mutate({ amount: 5 }, { context: { key } });
    expect(await client.pay.mutate({ amount: 5, currency: 'EUR' }, { context: { key } })).toBe(1);
    expect(
      (await rejectionOf(client.pay.mutate({ amount: 5, currency: 'USD' }, { context: { key } }))).data?.httpStatus,
    ).toBe(422);
  });
});

describe('outcome policy', () => {
  function failing(code: TRPCError['code'], mark = false) {
    let runs = 0;
    const router = t.router({
      op: idem()
        .input(z.object({ n: z.number() }))
        .mutation(() => {
          runs++;
          const error = new TRPCError({ code, message: `failure #${runs}` });
          throw mark ? retryable(error) : error;
        }),
    });
    return { router, runs: () => runs };
  }

  it('stores a 4xx and replays the same error without running again', async () => {
    const app = failing('BAD_REQUEST');
    const seen: Seen = [];
    const client = await serve(app.router, { seen });
    const key = randomUUID();
    const first = await rejectionOf(client.op.mutate({ n: 1 }, { context: { key } }));
    const replay = await rejectionOf(client.op.mutate({ n: 1 }, { context: { key } }));
    expect(first.message).toBe('failure #1');
    expect(replay.message).toBe('failure #1');
    expect(replay.data).toMatchObject({ code: 'BAD_REQUEST', httpStatus: 400 });
    expect(seen[1]!.get('idempotent-replayed')).toBe('true');
    expect(app.runs()).toBe(1);
  });

  it.each([
    'INTERNAL_SERVER_ERROR',
    'BAD_GATEWAY',
    'TIMEOUT',
    'CONFLICT',
    'TOO_MANY_REQUESTS',
    'CLIENT_CLOSED_REQUEST',
  ] as const)('releases the key after %s so a retry with it runs again', async (code) => {
    const app = failing(code);
    const client = await serve(app.router);
    const key = randomUUID();
    expect((await rejectionOf(client.op.mutate({ n: 1 }, { context: { key } }))).message).toBe('failure #1');
    expect((await rejectionOf(client.op.mutate({ n: 1 }, { context: { key } }))).message).toBe('failure #2');
    expect(app.runs()).toBe(2);
  });

  it('releases the key after an unknown throw', async () => {
    let runs = 0;
    const router = t.router({
      op: idem().mutation(() => {
        runs++;
        throw new Error('database connection reset');
      }),
    });
    const client = await serve(router);
    const key = randomUUID();
    expect((await rejectionOf(client.op.mutate(undefined, { context: { key } }))).data?.httpStatus).toBe(500);
    expect((await rejectionOf(client.op.mutate(undefined, { context: { key } }))).data?.httpStatus).toBe(500);
    expect(runs).toBe(2);
  });

  it('releases a 4xx marked retryable()', async () => {
    const app = failing('BAD_REQUEST', true);
    const client = await serve(app.router);
    const key = randomUUID();
    await rejectionOf(client.op.mutate({ n: 1 }, { context: { key } }));
    expect((await rejectionOf(client.op.mutate({ n: 1 }, { context: { key } }))).message).toBe('failure #2');
  });

  it('an output over maxResponseBytes reaches its caller, and its retries get response_too_large without running again', async () => {
    let runs = 0;
    const events: IdempotencyEvent[] = [];
    const router = t.router({
      big: idem({ onEvent: (e) => events.push(e) })
        .meta({ idempotency: { maxResponseBytes: 1_000 } })
        .input(z.object({ size: z.number() }))
        .mutation(({ input }) => {
          runs++;
          return 'x'.repeat(input.size);
        }),
    });
    const client = await serve(router);
    const key = randomUUID();
    // it ran: the caller gets its result
    expect(await client.big.mutate({ size: 5_000 }, { context: { key } })).toHaveLength(5_000);
    for (let retry = 0; retry < 2; retry++) {
      const error = await rejectionOf(client.big.mutate({ size: 5_000 }, { context: { key } }));
      expect(error.data).toMatchObject({ httpStatus: 500, idempotency: { reason: 'response_too_large' } });
      expect(error.message).toMatch(
        /ran, but its result was larger than maxResponseBytes \(1000 bytes\).*will not run again/,
      );
    }
    expect(runs).toBe(1);
    expect(events.filter((e) => e.result === 'completed').map((e) => e.reason)).toEqual(['response_too_large']);
    expect(events.filter((e) => e.result === 'replayed').map((e) => e.reason)).toEqual([
      'response_too_large',
      'response_too_large',
    ]);
    expect(events.filter((e) => e.result === 'released')).toEqual([]);
    // just under the limit is stored (the JSON quotes count)
    const small = randomUUID();
    expect(await client.big.mutate({ size: 998 }, { context: { key: small } })).toHaveLength(998);
    expect(await client.big.mutate({ size: 998 }, { context: { key: small } })).toHaveLength(998);
    expect(runs).toBe(2);
  });

  it('replays through the data transformer: Date, BigInt, Map and Set come back as themselves', async () => {
    const st = initTRPC.meta<IdempotencyMeta>().create({ transformer: superjson });
    let runs = 0;
    const router = st.router({
      order: withIdempotency(st.procedure, { scope: 'global', store: redisStore({ client: redis, prefix }) })
        .input(z.object({ at: z.date(), cents: z.bigint() }))
        .mutation(({ input }) => ({
          runs: ++runs,
          at: input.at,
          cents: input.cents * 2n,
          tags: new Map([['a', new Set([1, 2])]]),
          nothing: undefined,
        })),
    });
    const server = await startServer(router);
    servers.push(server);
    const client = createClient<typeof router>(server.url, { transformer: superjson });
    const key = randomUUID();
    const input = { at: new Date('2026-11-30T12:00:00Z'), cents: 12345678901234567890n };
    const first = await client.order.mutate(input, { context: { key } });
    const replay = await client.order.mutate(input, { context: { key } });
    expect(replay).toEqual(first);
    expect(replay.at).toBeInstanceOf(Date);
    expect(replay.cents).toBe(24691357802469135780n);
    expect(replay.tags.get('a')).toEqual(new Set([1, 2]));
    expect('nothing' in replay).toBe(true);
    expect(runs).toBe(1);
  });

  it('replays a procedure that returns nothing', async () => {
    let runs = 0;
    const router = t.router({
      fire: idem().mutation(() => {
        runs++;
      }),
    });
    const client = await serve(router);
    const key = randomUUID();
    expect(await client.fire.mutate(undefined, { context: { key } })).toBeUndefined();
    expect(await client.fire.mutate(undefined, { context: { key } })).toBeUndefined();
    expect(runs).toBe(1);
  });
});

describe('keys', () => {
  function counter(options: Partial<WithIdempotencyOptions<Ctx>> = {}) {
    let runs = 0;
    const router = t.router({
      op: idem(options)
        .input(z.object({ v: z.string() }))
        .mutation(() => ++runs),
    });
    return { router, runs: () => runs };
  }

  it('accepts 255 printable ASCII characters and refuses 256', async () => {
    const app = counter();
    const client = await serve(app.router);
    const ok = `${'~'.repeat(254)} `;
    expect(await client.op.mutate({ v: 'a' }, { context: { key: ok } })).toBe(1);
    const tooLong = await rejectionOf(client.op.mutate({ v: 'a' }, { context: { key: 'k'.repeat(256) } }));
    expect(tooLong.data).toMatchObject({ httpStatus: 400, idempotency: { reason: 'key_invalid' } });
    expect(tooLong.message).toMatch(/256 characters long; the limit is 255/);
    expect(app.runs()).toBe(1);
  });

  it.each([
    ['a tab', 'abc\tdef', /not printable ASCII \(code 9 at position 3\)/],
    ['non-ASCII', 'clé-é', /code 233/],
    ['an empty quoted string', '""', /is empty/],
    ['a broken quoted string', '"abc', /does not end with one/],
  ])('refuses a key with %s, and stores nothing', async (_label, key, message) => {
    const app = counter();
    const client = await serve(app.router);
    const error = await rejectionOf(client.op.mutate({ v: 'a' }, { context: { key } }));
    expect(error.data).toMatchObject({ httpStatus: 400, code: 'BAD_REQUEST', idempotency: { reason: 'key_invalid' } });
    expect(error.message).toMatch(message);
    expect(app.runs()).toBe(0);
  });

  it('refuses an empty header value', async () => {
    const app = counter();
    const client = await serve(app.router);
    const error = await rejectionOf(client.op.mutate({ v: 'a' }, { context: { headers: { 'Idempotency-Key': '' } } }));
    expect(error.data).toMatchObject({ httpStatus: 400 });
    expect(app.runs()).toBe(0);
  });

  it('reads a quoted key as the Structured Field string it is', async () => {
    const app = counter();
    const client = await serve(app.router);
    expect(await client.op.mutate({ v: 'a' }, { context: { key: '"abc"' } })).toBe(1);
    expect(await client.op.mutate({ v: 'a' }, { context: { key: 'abc' } })).toBe(1);
    expect(app.runs()).toBe(1);
  });

  it('with required: false, a call without a key runs unprotected; a key is still honoured', async () => {
    const app = counter({ required: false });
    const client = await serve(app.router);
    await client.op.mutate({ v: 'a' });
    await client.op.mutate({ v: 'a' });
    expect(app.runs()).toBe(2);
    const key = randomUUID();
    await client.op.mutate({ v: 'a' }, { context: { key } });
    await client.op.mutate({ v: 'a' }, { context: { key } });
    expect(app.runs()).toBe(3);
  });

  it('reads a custom header name', async () => {
    const app = counter({ header: 'X-Request-Key' });
    const client = await serve(app.router);
    const key = randomUUID();
    await client.op.mutate({ v: 'a' }, { context: { headers: { 'X-Request-Key': key } } });
    await client.op.mutate({ v: 'a' }, { context: { headers: { 'X-Request-Key': key } } });
    expect(app.runs()).toBe(1);
    expect((await rejectionOf(client.op.mutate({ v: 'a' }, { context: { key } }))).message).toMatch(
      /requires an X-Request-Key header/,
    );
  });

  it('scopes keys: the same key from two users is two operations', async () => {
    let runs = 0;
    const router = t.router({
      // a scope must not be undefined (the type says so): a request without a user is refused first
      op: idem({
        scope: ({ ctx }) => {
          if (ctx.user === undefined) throw new TRPCError({ code: 'UNAUTHORIZED' });
          return ctx.user;
        },
      })
        .input(z.object({ v: z.string() }))
        .mutation(({ ctx }) => ({ run: ++runs, user: ctx.user })),
    });
    const client = await serve(router);
    const key = randomUUID();
    const alice = await client.op.mutate({ v: 'a' }, { context: { key, headers: { 'x-user': 'alice' } } });
    const bob = await client.op.mutate({ v: 'a' }, { context: { key, headers: { 'x-user': 'bob' } } });
    expect(alice).toEqual({ run: 1, user: 'alice' });
    expect(bob).toEqual({ run: 2, user: 'bob' });
    expect(await client.op.mutate({ v: 'a' }, { context: { key, headers: { 'x-user': 'alice' } } })).toEqual(alice);
  });
});

describe('the builder', () => {
  it('runs the check after every middleware and parser, whatever the chaining order', async () => {
    const order: string[] = [];
    const auth = t.middleware(({ next }) => {
      order.push('auth');
      return next({ ctx: { user: 'carol' } });
    });
    let seenScope: unknown;
    const base = withIdempotency(t.procedure, {
      store: memoryStore(),
      scope: ({ ctx }) => {
        order.push('scope');
        seenScope = ctx.user;
        if (ctx.user === undefined) throw new TRPCError({ code: 'UNAUTHORIZED' });
        return ctx.user;
      },
    });
    const router = t.router({
      // middleware before input, meta in the middle, another middleware after
      a: base
        .use(auth)
        .meta({ idempotency: { excludeFields: ['note'] } })
        .input(z.object({ amount: z.number(), note: z.string() }))
        .use(({ next }) => {
          order.push('late');
          return next();
        })
        .mutation(({ ctx }) => {
          order.push('resolver');
          return ctx.user;
        }),
    });
    const client = await serve(router);
    const key = randomUUID();
    expect(await client.a.mutate({ amount: 1, note: 'x' }, { context: { key } })).toBe('carol');
    expect(order).toEqual(['auth', 'late', 'scope', 'resolver']);
    expect(seenScope).toBe('carol');
    expect(await client.a.mutate({ amount: 1, note: 'y' }, { context: { key } })).toBe('carol');
    expect(order).toEqual(['auth', 'late', 'scope', 'resolver', 'auth', 'late', 'scope']);
  });

  it('leaves queries untouched and keeps procedure types', async () => {
    const base = idem();
    const router = t.router({
      get: base.input(z.object({ id: z.string() })).query(({ input }) => ({ id: input.id, at: 1 })),
      put: base.input(z.object({ id: z.string() })).mutation(({ input }) => ({ id: input.id })),
    });
    const client = await serve(router);
    expect(await client.get.query({ id: 'x' })).toEqual({ id: 'x', at: 1 });
    expectTypeOf(client.put.mutate).parameter(0).toEqualTypeOf<{ id: string }>();
    expectTypeOf(client.put.mutate).returns.resolves.toEqualTypeOf<{ id: string }>();
    // @ts-expect-error the input type is checked
    await rejectionOf(client.put.mutate({ id: 1 }, { context: { key: 'k' } }));
  });

  it('meta idempotency: false turns protection off for one procedure', async () => {
    let runs = 0;
    const router = t.router({
      free: idem()
        .meta({ idempotency: false })
        .mutation(() => ++runs),
    });
    const client = await serve(router);
    await client.free.mutate();
    await client.free.mutate();
    expect(runs).toBe(2);
  });

  it('rejects bad meta when the procedure is defined, not per request', () => {
    expect(() =>
      idem()
        .meta({ idempotency: { lockTtl: 60_000, ttl: 1_000 } })
        .mutation(() => 1),
    ).toThrow(IdempotencyConfigError);
    expect(() =>
      idem()
        .meta({ idempotency: { lockTtl: 60_000, ttl: 1_000 } })
        .mutation(() => 1),
    ).toThrow(/meta.idempotency: lockTtl \(60000 ms\) is longer than ttl \(1000 ms\)/);
    expect(() => idem({ ttl: -1 })).toThrow(/ttl must be a positive number of milliseconds/);
    expect(() => idem({ inFlight: 'queue' as never })).toThrow(/inFlight must be 'reject' or 'wait'/);
  });

  it('explains a context without request headers instead of answering 400', async () => {
    const router = t.router({ op: idem().mutation(() => 1) });
    const caller = t.createCallerFactory(router)({});
    const error = await caller.op().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TRPCError);
    expect(error).toMatchObject({
      code: 'INTERNAL_SERVER_ERROR',
      message: expect.stringMatching(/no request headers to read Idempotency-Key from/),
    });
    // a request-time 500, not the creation-time IdempotencyConfigError
    expect((error as TRPCError).cause).not.toBeInstanceOf(IdempotencyConfigError);
  });

  it('getKey reads the key from anywhere, here for a server-side caller', async () => {
    let runs = 0;
    const router = t.router({
      op: idem({ getKey: ({ ctx }) => (ctx as { key?: string }).key })
        .input(z.object({ v: z.number() }))
        .mutation(() => ++runs),
    });
    const caller = t.createCallerFactory(router)({ key: 'job-42' } as Ctx);
    expect(await caller.op({ v: 1 })).toBe(1);
    expect(await caller.op({ v: 1 })).toBe(1);
    await expect(caller.op({ v: 2 })).rejects.toMatchObject({ code: 'UNPROCESSABLE_CONTENT' });
  });
});

describe('batches', () => {
  it('protects each mutation of a batch with its own indexed key, and marks replays per call', async () => {
    const runs: string[] = [];
    const base = idem();
    const router = t.router({
      pay: base.input(z.object({ id: z.string() })).mutation(({ input }) => {
        runs.push(input.id);
        return { id: input.id, n: runs.length };
      }),
      get: base.query(() => 'q'),
    });
    const seen: Seen = [];
    const client = await serve(router, { batch: true, seen });
    const keys = [randomUUID(), randomUUID(), randomUUID()];
    const call = (i: number) => client.pay.mutate({ id: `p${i}` }, { context: { key: keys[i] } });
    const first = await Promise.all([call(0), call(1), call(2)]);
    expect(first.map((r) => r.id)).toEqual(['p0', 'p1', 'p2']);
    expect(runs.sort()).toEqual(['p0', 'p1', 'p2']);
    expect(seen).toHaveLength(1);

    // again, in another order and with a new one: the three replay, the new one runs
    const fresh = randomUUID();
    const second = await Promise.all([
      call(2),
      client.pay.mutate({ id: 'p3' }, { context: { key: fresh } }),
      call(0),
      call(1),
    ]);
    expect(second.map((r) => r.id)).toEqual(['p2', 'p3', 'p0', 'p1']);
    expect(second[0]).toEqual(first[2]);
    expect(runs).toHaveLength(4);
    const headers = seen[1]!;
    expect([0, 1, 2, 3].map((i) => headers.get(`idempotent-replayed-${i}`))).toEqual(['true', null, 'true', 'true']);
    expect(headers.get('idempotent-replayed')).toBeNull();
  });

  it('httpBatchStreamLink: each call runs once with its key and replays the same body; the replay headers cannot be sent', async () => {
    const runs: string[] = [];
    const router = t.router({
      pay: idem()
        .input(z.object({ id: z.string() }))
        .mutation(({ input }) => {
          runs.push(input.id);
          return { id: input.id, n: runs.length };
        }),
    });
    const server = await startServer(router);
    servers.push(server);
    const seen: Headers[] = [];
    const client = createTRPCClient<typeof router>({
      links: [
        idempotencyLink(),
        httpBatchStreamLink({
          url: server.url,
          headers: idempotencyHeaders(),
          fetch: async (input, init) => {
            const response = await fetch(input, init);
            seen.push(response.headers);
            return response;
          },
        }),
      ],
    });
    const keys = [randomUUID(), randomUUID()];
    const call = (i: number) => client.pay.mutate({ id: `s${i}` }, { context: { idempotencyKey: keys[i] } });
    const first = await Promise.all([call(0), call(1)]);
    const again = await Promise.all([call(0), call(1)]);
    expect(again).toEqual(first);
    expect(runs.sort()).toEqual(['s0', 's1']);
    // headers go out before the calls finish: a replay cannot be marked
    expect(seen).toHaveLength(2);
    expect([0, 1].map((i) => seen[1]!.get(`idempotent-replayed-${i}`))).toEqual([null, null]);
  });

  it('never applies one plain key to two mutations of a batch', async () => {
    let runs = 0;
    const router = t.router({
      pay: idem()
        .input(z.object({ id: z.string() }))
        .mutation(() => ++runs),
    });
    const client = await serve(router, { batch: true });
    const key = randomUUID();
    const [a, b] = await Promise.allSettled([
      client.pay.mutate({ id: 'a' }, { context: { headers: { 'Idempotency-Key': key } } }),
      client.pay.mutate({ id: 'b' }, { context: { headers: { 'Idempotency-Key': key } } }),
    ]);
    expect(a).toEqual({ status: 'fulfilled', value: 1 });
    expect(b.status).toBe('rejected');
    const error = (b as PromiseRejectedResult).reason;
    expect(error.data).toMatchObject({ httpStatus: 400, idempotency: { reason: 'key_missing' } });
    expect(error.message).toMatch(/call is #1 of a batch: send Idempotency-Key-1/);
    expect(runs).toBe(1);
  });
});

describe.each(stores)('in flight, on the $name store', ({ make: makeStore }) => {
  it("inFlight: 'wait' makes a duplicate wait for the first outcome and replay it", async () => {
    let runs = 0;
    const release = gate();
    const watched = watchedStore(makeStore());
    const router = t.router({
      pay: withIdempotency(t.procedure, { scope: 'global', store: watched.store, inFlight: 'wait', waitTimeout: 5_000 })
        .input(z.object({ amount: z.number() }))
        .mutation(async () => {
          runs++;
          await release.opened;
          return { charge: randomUUID() };
        }),
    });
    const seen: Seen = [];
    const client = await serve(router, { seen });
    const key = randomUUID();
    const first = client.pay.mutate({ amount: 1 }, { context: { key } });
    await expect.poll(() => runs).toBe(1);
    const waiters = [1, 2, 3].map(() => client.pay.mutate({ amount: 1 }, { context: { key } }));
    // each duplicate found the key held, so waits: three tokens answered in_progress
    const waiting = () =>
      new Set(watched.claims.filter((c) => c.answer.state === 'in_progress').map((c) => c.input.token));
    await expect.poll(() => waiting().size).toBe(3);
    release.open();
    const results = await Promise.all([first, ...waiters]);
    expect(new Set(results.map((r) => r.charge)).size).toBe(1);
    expect(runs).toBe(1);
    expect(seen.filter((h) => h.get('idempotent-replayed') === 'true')).toHaveLength(3);
  });

  it("inFlight: 'wait' gives up with 409 after waitTimeout", async () => {
    const started = gate();
    const release = gate();
    const router = t.router({
      pay: withIdempotency(t.procedure, {
        scope: 'global',
        store: makeStore(),
        inFlight: 'wait',
        waitTimeout: 300,
      }).mutation(async () => {
        started.open();
        await release.opened;
        return 1;
      }),
    });
    const client = await serve(router);
    const key = randomUUID();
    const first = client.pay.mutate(undefined, { context: { key } });
    await started.opened;
    const error = await rejectionOf(client.pay.mutate(undefined, { context: { key } }));
    expect(error.data).toMatchObject({ httpStatus: 409, idempotency: { reason: 'in_progress' } });
    release.open();
    expect(await first).toBe(1);
  });

  it('renews the claim of a procedure that runs three times longer than lockTtl: it runs once while retries arrive', async () => {
    let runs = 0;
    let renewals = 0;
    const lockTtl = 300;
    const release = gate();
    const router = t.router({
      slow: withIdempotency(t.procedure, {
        scope: 'global',
        store: makeStore(),
        lockTtl,
        onEvent: (e) => void (e.result === 'renewed' && renewals++),
      }).mutation(async () => {
        runs++;
        await release.opened;
        return 'done';
      }),
    });
    const client = await serve(router);
    const key = randomUUID();
    const first = client.slow.mutate(undefined, { context: { key } });
    await expect.poll(() => runs).toBe(1);
    // A retry after each renewal (every lockTtl / 3, in real time: Redis and PostgreSQL expire an
    // unrenewed claim by their own clocks), for 3 × lockTtl: each finds the key held.
    const statuses: number[] = [];
    for (let renewed = 1; renewed <= 9; renewed++) {
      await expect.poll(() => renewals, { timeout: 5_000 }).toBeGreaterThanOrEqual(renewed);
      statuses.push(
        await client.slow.mutate(undefined, { context: { key } }).then(
          () => 200,
          (e) => e.data?.httpStatus as number,
        ),
      );
    }
    release.open();
    expect(await first).toBe('done');
    expect(statuses).toEqual(Array(9).fill(409));
    expect(await client.slow.mutate(undefined, { context: { key } })).toBe('done');
    expect(runs).toBe(1);
  });
});

describe('contexts and scopes', () => {
  it('keeps a context built as a class instance intact (methods and getters)', async () => {
    class Session {
      constructor(private readonly id: string) {}
      userId() {
        return this.id;
      }
    }
    const ct = initTRPC.context<{ session: Session; req: unknown; res: unknown }>().create();
    class RequestContext {
      constructor(
        public req: unknown,
        public res: unknown,
      ) {}
      get session() {
        return new Session('u-7');
      }
    }
    const router = ct.router({
      op: withIdempotency(ct.procedure, { store: memoryStore(), scope: ({ ctx }) => ctx.session.userId() }).mutation(
        ({ ctx }) => ctx.session.userId(),
      ),
    });
    // startServer spreads its context into an object: build a class instance here instead
    const { createHTTPServer } = await import('@trpc/server/adapters/standalone');
    const http = createHTTPServer({ router, createContext: ({ req, res }) => new RequestContext(req, res) as never });
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(http.address() as { port: number }).port}`;
    const client = createClient<typeof router>(url);
    try {
      expect(await client.op.mutate(undefined, { context: { key: randomUUID() } })).toBe('u-7');
    } finally {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    }
  });

  it.each([
    ['undefined', undefined, /scope returned undefined/],
    ['an empty string', '', /scope returned an empty string/],
    ['an object', { id: 1 }, /scope returned an object\./],
  ])('refuses a scope of %s with a message that says what to return', async (_label, value, message) => {
    let runs = 0;
    const router = t.router({ op: idem({ scope: () => value as never }).mutation(() => ++runs) });
    const client = await serve(router);
    const error = await rejectionOf(client.op.mutate(undefined, { context: { key: randomUUID() } }));
    expect(error.data?.httpStatus).toBe(500);
    expect(error.message).toMatch(message);
    expect(error.message).toMatch(/or null for a call that is deliberately unscoped/);
    expect(runs).toBe(0);
  });

  it('a context with the request but no response: protection works, the replay is not marked', async () => {
    let runs = 0;
    const bare = initTRPC.context<{ req: unknown }>().meta<IdempotencyMeta>().create();
    const router = bare.router({
      pay: withIdempotency(bare.procedure, { scope: 'global', store: memoryStore() }).mutation(() => ({ n: ++runs })),
    });
    const { createHTTPServer } = await import('@trpc/server/adapters/standalone');
    const server = await listen(createHTTPServer({ router, createContext: ({ req }) => ({ req }) }));
    servers.push(server);
    const url = `${server.url}/pay`;
    const key = randomUUID();
    const send = () =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: '{}',
      });
    const [a, b] = [await send(), await send()];
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(await b.json()).toEqual(await a.json());
    expect(b.headers.get('idempotent-replayed')).toBeNull();
    expect(runs).toBe(1);
    expect((await send()).status).toBe(200);
    expect(
      (await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })).status,
    ).toBe(400);
  });

  it('a scope of null is an explicitly unscoped call', async () => {
    let runs = 0;
    const router = t.router({ op: idem({ scope: () => null }).mutation(() => ++runs) });
    const client = await serve(router);
    const key = randomUUID();
    await client.op.mutate(undefined, { context: { key } });
    expect(await client.op.mutate(undefined, { context: { key } })).toBe(1);
  });

  it('refuses to read a per-call key from the shared headers of a WebSocket connection', async () => {
    const router = t.router({ op: idem().mutation(() => 1) });
    const socketLike = { send() {}, ping() {} };
    const caller = t.createCallerFactory(router)({
      req: { headers: { 'idempotency-key': 'k' } },
      res: socketLike,
    } as never);
    const error = await caller.op().catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'INTERNAL_SERVER_ERROR',
      message: expect.stringMatching(/over a WebSocket .* Pass getKey/),
    });
    expect((error as TRPCError).cause).not.toBeInstanceOf(IdempotencyConfigError);
  });

  it('refuses a key header sent twice, which Node would join into one value', async () => {
    let runs = 0;
    const router = t.router({ op: idem().mutation(() => ++runs) });
    const server = await startServer(router);
    servers.push(server);
    const { request } = await import('node:http');
    const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(
        `${server.url}/op`,
        { method: 'POST', headers: { 'content-type': 'application/json' } },
        (res) => {
          let data = '';
          res.on('data', (c) => (data += c));
          res.on('end', () => resolve({ status: res.statusCode!, body: data }));
        },
      );
      req.setHeader('idempotency-key', ['a', 'b']);
      req.on('error', reject);
      req.end('{}');
    });
    expect(status).toBe(400);
    expect(body).toMatch(/sent 2 times; send it once per call/);
    expect(runs).toBe(0);
  });

  it('refuses engine options next to a shared engine, instead of ignoring them', async () => {
    const { createIdempotencyEngine } = await import('../../src/index.js');
    const engine = createIdempotencyEngine({ store: memoryStore() });
    expect(() => withIdempotency(t.procedure, { scope: 'global', engine, ttl: 1_000, onEvent: () => {} })).toThrow(
      /onEvent, ttl would be ignored, because an engine is given/,
    );
    expect(() =>
      withIdempotency(t.procedure, { scope: 'global', engine, header: 'X-Key', required: false }),
    ).not.toThrow();
  });
});

describe('the builder, further', () => {
  it('works with .output(), .concat() and a per-procedure required: false', async () => {
    let runs = 0;
    const extra = t.procedure.input(z.object({ note: z.string().optional() }));
    const router = t.router({
      op: idem()
        .concat(extra)
        .input(z.object({ amount: z.number() }))
        .output(z.object({ run: z.number(), amount: z.number() }))
        .mutation(({ input }) => ({ run: ++runs, amount: input.amount, dropped: 'by the output parser' })),
      optional: idem()
        .meta({ idempotency: { required: false } })
        .mutation(() => ++runs),
    });
    const client = await serve(router);
    const key = randomUUID();
    const first = await client.op.mutate({ amount: 3, note: 'a' }, { context: { key } });
    expect(first).toEqual({ run: 1, amount: 3 });
    expect(await client.op.mutate({ amount: 3, note: 'a' }, { context: { key } })).toEqual(first);
    expect((await rejectionOf(client.op.mutate({ amount: 3, note: 'b' }, { context: { key } }))).data?.httpStatus).toBe(
      422,
    );
    await client.optional.mutate();
    await client.optional.mutate();
    expect(runs).toBe(3);
  });

  it('keeps data.idempotency when a procedure has its own .errors() formatter only if that formatter adds it', async () => {
    const { idempotencyErrorData } = await import('../../src/index.js');
    const router = t.router({
      op: idem()
        .errors(({ shape, error }) => ({
          ...shape,
          data: { ...shape.data, idempotency: idempotencyErrorData(error), app: 'x' },
        }))
        .mutation(() => 1),
    });
    const client = await serve(router);
    const error = await rejectionOf(client.op.mutate());
    expect(error.data).toMatchObject({ app: 'x', idempotency: { reason: 'key_missing' } });
  });
});

describe('the caller going away', () => {
  it("does not abort the resolver's signal: the operation finishes and the retry gets the replay", async () => {
    let runs = 0;
    let abortedInside: boolean | undefined;
    const started = gate();
    const router = t.router({
      pay: idem().mutation(async ({ ctx, signal }) => {
        runs++;
        // the server saw the caller go away: tRPC aborts the request's own signal on this event
        const { res } = ctx as Ctx & { res: ServerResponse };
        const gone = new Promise<void>((resolve) => res.once('close', () => resolve()));
        started.open();
        await gone;
        abortedInside = signal?.aborted;
        return { charge: runs };
      }),
    });
    const client = await serve(router);
    const key = randomUUID();
    const gaveUp = new AbortController();
    const first = client.pay.mutate(undefined, { context: { key }, signal: gaveUp.signal });
    await started.opened;
    gaveUp.abort();
    await expect(first).rejects.toThrow();
    await expect.poll(() => abortedInside).toBe(false);
    await expect
      .poll(async () => client.pay.mutate(undefined, { context: { key } }).catch((e) => e.data?.httpStatus))
      .toEqual({ charge: 1 });
    expect(runs).toBe(1);
  });
});

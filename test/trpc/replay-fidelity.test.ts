/**
 * A replay is the first answer: the same value through a server-side caller,
 * the same body over HTTP, an `.output()` parser that accepts it as it
 * accepted the first, a stored error that formats as the first did. And what
 * is stored is what the client may see. On every store, with and without a
 * data transformer.
 */
import { randomUUID } from 'node:crypto';
import { initTRPC, TRPCError } from '@trpc/server';
import fc from 'fast-check';
import superjson from 'superjson';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type IdempotencyMeta, type IdempotencyStore, memoryStore, withIdempotency } from '../../src/index.js';
import { rawRequest, sendRaw } from '../helpers/raw-http.js';
import { liveStores } from '../helpers/stores.js';
import { startServer, type TestServer } from '../helpers/trpc.js';

const { stores } = liveStores('fidelity', ['memory', 'redis', 'postgres', 'mariadb']);
const servers: TestServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

/** The store, and every body it was asked to keep (outcomes and steps). */
function recording(store: IdempotencyStore) {
  const bodies: string[] = [];
  const recorded: IdempotencyStore = {
    ...store,
    name: store.name,
    complete: (input) => {
      bodies.push(input.body);
      return store.complete(input);
    },
  };
  return { store: recorded, bodies };
}

interface Ctx {
  key?: string;
}

/** The routers of one case: without a transformer, and with superjson. */
function routers(store: IdempotencyStore) {
  const plain = initTRPC.context<Ctx>().meta<IdempotencyMeta>().create();
  const withSuperjson = initTRPC.context<Ctx>().meta<IdempotencyMeta>().create({ transformer: superjson });
  let runs = 0;
  let refused = 0;
  class Declined extends Error {
    override name = 'Declined';
    readonly status = 402;
    // What an HTTP client's error carries: not kept, so that it does not sit in the store
    readonly config = { headers: { authorization: 'Bearer SECRET-TOKEN' } };
    readonly responseBody = 'x'.repeat(5_000);
    constructor(readonly reasonCode: string) {
      super(`declined: ${reasonCode}`);
    }
  }
  const build = (t: typeof plain) => {
    const options = { store, scope: 'global', getKey: ({ ctx }: { ctx: Ctx }) => ctx.key } as const;
    const idempotent = withIdempotency(t.procedure, options);
    return t.router({
      order: idempotent
        .output(z.object({ id: z.string(), createdAt: z.date(), tags: z.set(z.string()), total: z.bigint() }))
        .mutation(() => ({
          id: `order_${++runs}`,
          createdAt: new Date(1_700_000_000_000 + runs),
          tags: new Set(['a', 'b']),
          total: 10n ** 20n,
        })),
      user: idempotent.output(z.object({ id: z.string(), email: z.string() })).mutation(() => ({
        id: `user_${++runs}`,
        email: 'a@example.com',
        passwordHash: 'HASH-SECRET',
        resetToken: 'TOKEN-SECRET',
      })),
      length: idempotent
        .output(z.string().transform((text) => text.length))
        .mutation(() => `${++runs}`.padEnd(runs + 3, '.')),
      pay: idempotent.mutation(() => {
        runs++;
        refused++;
        throw new TRPCError({
          code: 'PAYMENT_REQUIRED',
          message: 'Card declined',
          cause: new Declined('insufficient_funds'),
        });
      }),
    });
  };
  return {
    plain: build(plain),
    withSuperjson: build(withSuperjson as never),
    runs: () => runs,
    refused: () => refused,
    plainT: plain,
  };
}

describe.each(stores)('on the $name store', ({ make: makeStore }) => {
  it('without a transformer, a replay through a server-side caller is the value the first call returned (Date, Set, BigInt)', async () => {
    const { store } = recording(makeStore());
    const app = routers(store);
    const caller = initTRPC.context<Ctx>().create().createCallerFactory(app.plain)({ key: randomUUID() });
    const first = await caller.order();
    const again = await caller.order();
    expect(again).toEqual(first);
    expect(again.createdAt).toBeInstanceOf(Date);
    expect(again.tags).toBeInstanceOf(Set);
    expect(typeof again.total).toBe('bigint');
    expect(app.runs()).toBe(1);
  });

  it('without a transformer, an .output() with z.date() accepts the replay over HTTP: the same body, replayed', async () => {
    const { store } = recording(makeStore());
    const t = initTRPC.context<Ctx & { req: unknown; res: unknown }>().meta<IdempotencyMeta>().create();
    let runs = 0;
    const router = t.router({
      order: withIdempotency(t.procedure, { store, scope: 'global' })
        .output(z.object({ id: z.string(), createdAt: z.date() }))
        .mutation(() => ({ id: `order_${++runs}`, createdAt: new Date(1_700_000_000_000) })),
    });
    const server = await startServer(router);
    servers.push(server);
    const port = Number(new URL(server.url).port);
    const key = randomUUID();
    const send = () => sendRaw(port, rawRequest({ path: '/order', headers: [['Idempotency-Key', key]], body: '' }));
    const first = await send();
    const again = await send();
    expect(first.status).toBe(200);
    expect(again.status).toBe(200);
    expect(again.body).toBe(first.body);
    expect(again.headers['idempotent-replayed']).toEqual(['true']);
    expect(runs).toBe(1);
  });

  it('property: without a transformer, a replay over HTTP is byte for byte the first answer (-0, NaN, holes, invalid Dates, lone surrogates, NUL, Maps, Sets)', async () => {
    const { store } = recording(makeStore());
    const t = initTRPC.context<{ req: { headers: Record<string, unknown> } }>().meta<IdempotencyMeta>().create();
    const answers = new Map<string, unknown>();
    let runs = 0;
    const router = t.router({
      echo: withIdempotency(t.procedure, { store, scope: 'global' }).mutation(({ ctx }) => {
        runs++;
        return answers.get(String(ctx.req.headers['idempotency-key']));
      }),
    });
    const server = await startServer(router);
    servers.push(server);
    const port = Number(new URL(server.url).port);
    const value = fc.anything({ withDate: true, withMap: true, withSet: true, withSparseArray: true, maxDepth: 3 });
    let cases = 0;
    await fc.assert(
      fc.asyncProperty(value, async (answer) => {
        const key = randomUUID();
        answers.set(key, answer);
        const send = () => sendRaw(port, rawRequest({ path: '/echo', headers: [['Idempotency-Key', key]], body: '' }));
        const first = await send();
        const again = await send();
        expect(again.status).toBe(first.status);
        expect(again.body).toBe(first.body);
        if (first.status === 200) expect(again.headers['idempotent-replayed']).toEqual(['true']);
        cases++;
      }),
      { numRuns: 60 },
    );
    expect(runs).toBe(cases);
  });

  it('what .output() strips is not stored (a password hash, a reset token), and the replay is the first answer', async () => {
    for (const variant of ['plain', 'withSuperjson'] as const) {
      const { store, bodies } = recording(makeStore());
      const app = routers(store);
      const caller = initTRPC.context<Ctx>().create().createCallerFactory(app[variant])({ key: randomUUID() });
      const first = await caller.user();
      expect(first).toEqual({ id: 'user_1', email: 'a@example.com' });
      expect(await caller.user()).toEqual(first);
      expect(bodies).toHaveLength(1);
      expect(bodies[0]).not.toMatch(/HASH-SECRET|TOKEN-SECRET|passwordHash/);
      expect(app.runs()).toBe(1);
    }
  });

  it('an .output() that transforms: the replay passes it as the first answer did (the value before it is stored)', async () => {
    for (const variant of ['plain', 'withSuperjson'] as const) {
      const { store } = recording(makeStore());
      const app = routers(store);
      const caller = initTRPC.context<Ctx>().create().createCallerFactory(app[variant])({ key: randomUUID() });
      const first = await caller.length();
      expect(first).toBe(4);
      expect(await caller.length()).toBe(4);
      expect(app.runs()).toBe(1);
    }
  });

  it('a stored 4xx is replayed with the name, message and scalar fields of its cause, so an errorFormatter derives the same data', async () => {
    for (const variant of ['plain', 'withSuperjson'] as const) {
      const { store, bodies } = recording(makeStore());
      const app = routers(store);
      const caller = initTRPC.context<Ctx>().create().createCallerFactory(app[variant])({ key: randomUUID() });
      const errors: TRPCError[] = [];
      for (let i = 0; i < 2; i++) {
        try {
          await caller.pay();
        } catch (error) {
          errors.push(error as TRPCError);
        }
      }
      expect(errors).toHaveLength(2);
      const [first, replayed] = errors as [TRPCError, TRPCError];
      expect(replayed.code).toBe(first.code);
      expect(replayed.message).toBe(first.message);
      expect(replayed.cause?.name).toBe('Declined');
      expect(replayed.cause?.message).toBe(first.cause?.message);
      expect(replayed.cause).toMatchObject({ reasonCode: 'insufficient_funds', status: 402 });
      // objects and long strings of the cause are not stored: a request's headers, a response body
      expect(replayed.cause).not.toHaveProperty('config');
      expect(replayed.cause).not.toHaveProperty('responseBody');
      expect(bodies.join('')).not.toMatch(/SECRET-TOKEN|x{1000}/);
      expect(app.refused()).toBe(1);
    }
  });
});

describe('a stored 4xx is bounded as a result is', () => {
  it('a 4xx whose message exceeds maxResponseBytes: its caller gets it, retries get response_too_large, it never runs twice', async () => {
    const t = initTRPC.context<Ctx>().meta<IdempotencyMeta>().create();
    let runs = 0;
    const router = t.router({
      pay: withIdempotency(t.procedure, {
        store: memoryStore(),
        scope: 'global',
        getKey: ({ ctx }) => ctx.key,
        maxResponseBytes: 10_000,
      }).mutation(() => {
        runs++;
        throw new TRPCError({ code: 'BAD_REQUEST', message: `declined: ${'x'.repeat(20_000)}` });
      }),
    });
    const caller = t.createCallerFactory(router)({ key: randomUUID() });
    await expect(caller.pay()).rejects.toMatchObject({ code: 'BAD_REQUEST' });
    await expect(caller.pay()).rejects.toMatchObject({
      code: 'INTERNAL_SERVER_ERROR',
      cause: { reason: 'response_too_large' },
    });
    expect(runs).toBe(1);
  });
});

describe('an .output() no stored form can pass again', () => {
  it('without a transformer, a class the parser insists on: the first call answers, retries get outcome_unreplayable, it never runs twice', async () => {
    class Money {
      constructor(readonly cents: number) {}
    }
    const t = initTRPC.context<Ctx>().meta<IdempotencyMeta>().create();
    let runs = 0;
    const router = t.router({
      pay: withIdempotency(t.procedure, { store: memoryStore(), scope: 'global', getKey: ({ ctx }) => ctx.key })
        .output(z.object({ amount: z.instanceof(Money) }))
        .mutation(() => ({ amount: new Money(++runs) })),
    });
    const caller = t.createCallerFactory(router)({ key: randomUUID() });
    const first = await caller.pay();
    expect(first.amount).toBeInstanceOf(Money);
    await expect(caller.pay()).rejects.toMatchObject({
      code: 'INTERNAL_SERVER_ERROR',
      cause: { reason: 'outcome_unreplayable' },
    });
    expect(runs).toBe(1);
  });
});

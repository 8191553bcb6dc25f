/**
 * Configuration mistakes: everything that can be checked when the builder or
 * the procedure is created throws `IdempotencyConfigError` then, never per
 * request. What only a request can show (the context's shape, the scope's
 * value) is a 500 `TRPCError` whose message says what to change, the
 * procedure does not run, and it is not an `IdempotencyConfigError`.
 */

import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { AddressInfo } from 'node:net';
import { type AnyTRPCRouter, initTRPC, TRPCError } from '@trpc/server';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { applyWSSHandler } from '@trpc/server/adapters/ws';
import superjson from 'superjson';
import { afterEach, describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import {
  createIdempotencyEngine,
  IdempotencyConfigError,
  type IdempotencyMeta,
  idempotencyErrorFormatter,
  memoryStore,
  type WithIdempotencyOptions,
  withIdempotency,
} from '../../src/index.js';
import { createClient, rejectionOf } from '../helpers/trpc.js';

interface Ctx {
  user?: { id: string };
}
// isDev: false, as in production: tRPC must still pass the message on
const t = initTRPC
  .context<Ctx>()
  .meta<IdempotencyMeta>()
  .create({ errorFormatter: idempotencyErrorFormatter, isDev: false });

function configErrorOf(fn: () => unknown): IdempotencyConfigError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(IdempotencyConfigError);
    return error as IdempotencyConfigError;
  }
  throw new Error('expected an IdempotencyConfigError, but nothing was thrown');
}

describe('options of the wrong type are refused when the builder is created', () => {
  it.each([
    [
      'scope',
      { scope: 'user' },
      /withIdempotency: scope must be a function .*\(\{ ctx \}\) => ctx\.user\.id, or 'global', got the string "user"/,
    ],
    [
      'getKey',
      { getKey: 42 },
      /withIdempotency: getKey must be a function that returns the key, .*, got the number 42\./,
    ],
    ['required', { required: 'yes' }, /withIdempotency: required must be true or false, got the string "yes"\./],
    [
      'header',
      { header: 5 },
      /withIdempotency: header must be a header name \(letters, digits, dashes\), such as 'Idempotency-Key', got the number 5\./,
    ],
    [
      'header',
      { header: 'Idempotency Key' },
      /withIdempotency: header must be a header name \(letters, digits, dashes\)/,
    ],
    [
      'replayedHeader',
      { replayedHeader: true },
      /withIdempotency: replayedHeader must be a header name .*, such as 'Idempotent-Replayed', got true\./,
    ],
    [
      'engine',
      { engine: {} },
      /withIdempotency: engine must be an engine made by createIdempotencyEngine\(\), got an object without execute\(\)\. Leave it out/,
    ],
    ['engine', { engine: 'shared' }, /withIdempotency: engine must be an engine .*, got the string "shared"\./],
  ])('%s: %j', (_name, options, message) => {
    const error = configErrorOf(() => withIdempotency(t.procedure, options as never));
    expect(error.message).toMatch(message);
  });

  it('options that are not an object, and a first argument that is not a procedure builder', () => {
    expect(configErrorOf(() => withIdempotency(t.procedure, 'strict' as never)).message).toMatch(
      /withIdempotency: options must be an object, with at least scope, got the string "strict"\./,
    );
    expect(configErrorOf(() => withIdempotency(t.procedure, null as never)).message).toMatch(
      /options must be an object, with at least scope, got null\./,
    );
    expect(configErrorOf(() => withIdempotency(t.router({}) as never, { scope: 'global' })).message).toMatch(
      /withIdempotency: the first argument must be a tRPC procedure builder, such as t\.procedure/,
    );
  });

  it('accepts every option with its right type', () => {
    const engine = createIdempotencyEngine({ store: memoryStore() });
    expect(() =>
      withIdempotency(t.procedure, {
        engine,
        scope: () => null,
        getKey: () => undefined,
        required: false,
        header: 'X-Key',
        replayedHeader: 'X-Replayed',
      }),
    ).not.toThrow();
    expect(() => withIdempotency(t.procedure, { scope: 'global' })).not.toThrow();
    expect(() =>
      withIdempotency(t.procedure, { scope: 'global', getKey: undefined, required: undefined, header: undefined }),
    ).not.toThrow();
  });

  it('scope is required: leaving it out (or the options) is refused, saying what to pass', () => {
    const expected =
      /withIdempotency: say whose keys these are\. Pass scope: \(\{ ctx \}\) => ctx\.user\.id .*; or scope: 'global' if every caller may share every key/;
    // @ts-expect-error scope is required
    expect(configErrorOf(() => withIdempotency(t.procedure, { store: memoryStore() })).message).toMatch(expected);
    // @ts-expect-error options are required
    expect(configErrorOf(() => withIdempotency(t.procedure)).message).toMatch(expected);
    expect(configErrorOf(() => withIdempotency(t.procedure, { scope: undefined as never })).message).toMatch(expected);
    const engine = createIdempotencyEngine({ store: memoryStore() });
    // an engine of its own does not scope the keys either
    // @ts-expect-error scope is required
    expect(configErrorOf(() => withIdempotency(t.procedure, { engine })).message).toMatch(expected);
  });
});

describe("the router's data transformer", () => {
  const withSuperjson = initTRPC.create({ transformer: superjson });
  const plain = initTRPC.create();

  it('is read from the builder, and a transformer given too must be the same one', () => {
    expect(() => withIdempotency(withSuperjson.procedure, { scope: 'global' })).not.toThrow();
    expect(() => withIdempotency(withSuperjson.procedure, { scope: 'global', transformer: superjson })).not.toThrow();
    expect(() =>
      withIdempotency(withSuperjson.procedure, {
        scope: 'global',
        transformer: { input: superjson, output: superjson },
      }),
    ).not.toThrow();
    expect(() => withIdempotency(plain.procedure, { scope: 'global', transformer: null })).not.toThrow();
    const other = { serialize: (v: unknown) => v, deserialize: (v: unknown) => v };
    expect(
      configErrorOf(() => withIdempotency(withSuperjson.procedure, { scope: 'global', transformer: other })).message,
    ).toMatch(
      /withIdempotency: transformer is not the one the router was created with .*Pass the same one, or leave the option out/,
    );
    expect(
      configErrorOf(() => withIdempotency(plain.procedure, { scope: 'global', transformer: superjson })).message,
    ).toMatch(/transformer is not the one the router was created with/);
    expect(
      configErrorOf(() => withIdempotency(withSuperjson.procedure, { scope: 'global', transformer: null })).message,
    ).toMatch(/transformer is null, but the router was created with a data transformer/);
    expect(
      configErrorOf(() =>
        withIdempotency(withSuperjson.procedure, { scope: 'global', transformer: 'superjson' as never }),
      ).message,
    ).toMatch(/transformer must be a data transformer, such as superjson .*, or null, got the string "superjson"\./);
  });

  it('is required where the builder does not carry the router config (@trpc/server before 11.22), and then used', async () => {
    // What an 11.19 builder looks like to withIdempotency: a builder whose _def has no config.
    const old = new Proxy(withSuperjson.procedure, {
      get: (target, prop, receiver) =>
        prop === '_def' ? { ...target._def, config: undefined } : Reflect.get(target, prop, receiver),
    });
    expect(configErrorOf(() => withIdempotency(old, { scope: 'global' })).message).toMatch(
      /this @trpc\/server \(before 11\.22\) does not tell a procedure builder which data transformer the router uses.*`transformer: superjson`.*`transformer: null`/,
    );
    expect(() => withIdempotency(old, { scope: 'global', transformer: superjson })).not.toThrow();
  });
});

describe('meta of the wrong type is refused when .mutation() builds the procedure', () => {
  const idem = withIdempotency(t.procedure, { scope: 'global', store: memoryStore() });

  it.each([
    [
      'required: "yes"',
      { required: 'yes' },
      /meta\.idempotency: required must be true or false, got the string "yes"\./,
    ],
    ['required: 1', { required: 1 }, /meta\.idempotency: required must be true or false, got the number 1\./],
    [
      'true',
      true,
      /meta\.idempotency must be an object of options, or false to turn protection off, got true\. Leave it out/,
    ],
    ['a string', 'on', /meta\.idempotency must be an object of options, or false .*, got the string "on"\./],
    ['null', null, /meta\.idempotency must be an object of options, or false .*, got null\./],
  ])('%s', (_label, idempotency, message) => {
    const procedure = idem.meta({ idempotency: idempotency as never });
    expect(configErrorOf(() => procedure.mutation(() => 1)).message).toMatch(message);
  });

  it('accepts required true or false, an empty object and false', () => {
    for (const idempotency of [{ required: true }, { required: false }, {}, false] as const) {
      expect(() => idem.meta({ idempotency }).mutation(() => 1)).not.toThrow();
    }
  });
});

describe('types catch what they can', () => {
  it('a scope cannot return undefined: null is the explicit "unscoped"', () => {
    type Scope = Exclude<WithIdempotencyOptions<Ctx>['scope'], 'global'>;
    expectTypeOf<ReturnType<Scope>>().toEqualTypeOf<string | number | null | Promise<string | number | null>>();
    // @ts-expect-error a route without auth would put every caller in one scope
    withIdempotency(t.procedure, { scope: ({ ctx }) => ctx.user?.id });
    // @ts-expect-error the same, from an async scope
    withIdempotency(t.procedure, { scope: async ({ ctx }) => ctx.user?.id });
    withIdempotency(t.procedure, { scope: ({ ctx }) => ctx.user?.id ?? null });
    withIdempotency(t.procedure, { scope: async ({ ctx }) => (ctx.user === undefined ? null : ctx.user.id) });
    withIdempotency(t.procedure, { scope: () => 42 });
    // and what the types refuse is refused at run time too, for JavaScript callers and casts
    expect(() =>
      // @ts-expect-error options of the wrong type
      withIdempotency(t.procedure, { scope: 'global', required: 'yes' }),
    ).toThrow(IdempotencyConfigError);
    expect(() =>
      withIdempotency(t.procedure, { scope: 'global' })
        // @ts-expect-error meta of the wrong type
        .meta({ idempotency: { required: 'yes' } })
        .mutation(() => 1),
    ).toThrow(IdempotencyConfigError);
  });
});

/** A standalone server whose `onError` keeps what the server threw; `context` builds each call's context. */
async function serve(router: AnyTRPCRouter, context: (opts: { req: unknown; res: unknown }) => object) {
  const errors: TRPCError[] = [];
  const server = createHTTPServer({ router, createContext: context, onError: ({ error }) => errors.push(error) });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return { client: createClient<typeof router>(url) as any, errors };
}
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

/** What the server threw is a 500 TRPCError and nothing in its cause chain is an IdempotencyConfigError. */
function expectPlain500(error: unknown, message: RegExp) {
  expect(error).toBeInstanceOf(TRPCError);
  expect(error).toMatchObject({ code: 'INTERNAL_SERVER_ERROR' });
  expect((error as Error).message).toMatch(message);
  for (let e: unknown = error; e != null; e = (e as { cause?: unknown }).cause)
    expect(e).not.toBeInstanceOf(IdempotencyConfigError);
}

describe('what only a request can show is a 500 that says what to change', () => {
  it('a context without request headers', async () => {
    let runs = 0;
    const router = t.router({
      op: withIdempotency(t.procedure, { scope: 'global', store: memoryStore() }).mutation(() => ++runs),
    });
    const { client, errors } = await serve(router, () => ({})); // forgot to return req
    const error = await rejectionOf(client.op.mutate(undefined, { context: { key: randomUUID() } }));
    const message =
      /Procedure op: the tRPC context has no request headers to read Idempotency-Key from\. Return the request from createContext .* or pass getKey\./;
    expect(error.data).toMatchObject({ code: 'INTERNAL_SERVER_ERROR', httpStatus: 500 });
    expect(error.data?.idempotency).toBeUndefined();
    expect(error.message).toMatch(message);
    expect(errors).toHaveLength(1);
    expectPlain500(errors[0], message);
    expect(runs).toBe(0);

    // the server-side caller gets the same error
    const caller = t.createCallerFactory(router)({});
    expectPlain500(await caller.op().catch((e: unknown) => e), message);
    expect(runs).toBe(0);
  });

  it.each([
    ['undefined', undefined, /scope returned undefined\./],
    ['an empty string', '', /scope returned an empty string\./],
    ['an object', { id: 1 }, /scope returned an object\./],
    ['NaN', Number.NaN, /scope returned the number NaN\./],
    ['a boolean', true, /scope returned true\./],
  ])('a scope that returns %s', async (_label, value, returned) => {
    let runs = 0;
    const router = t.router({
      op: withIdempotency(t.procedure, { store: memoryStore(), scope: async () => value as never }).mutation(
        () => ++runs,
      ),
    });
    const { client, errors } = await serve(router, ({ req, res }) => ({ req, res }));
    const error = await rejectionOf(client.op.mutate(undefined, { context: { key: randomUUID() } }));
    const message =
      /Procedure op: scope returned .*\. Return the user or tenant id \(a non-empty string or a number\), or null for a call that is deliberately unscoped\./;
    expect(error.data).toMatchObject({ code: 'INTERNAL_SERVER_ERROR', httpStatus: 500 });
    expect(error.message).toMatch(message);
    expect(error.message).toMatch(returned);
    expectPlain500(errors[0], message);
    expect(runs).toBe(0);
  });

  it('getKey that returns something other than a string', async () => {
    let runs = 0;
    const router = t.router({
      op: withIdempotency(t.procedure, { scope: 'global', store: memoryStore(), getKey: ({ input }) => input as never })
        .input(z.unknown())
        .mutation(() => ++runs),
    });
    const { client, errors } = await serve(router, ({ req, res }) => ({ req, res }));
    const message =
      /Procedure op: getKey returned an object\. Return the key as a string, or undefined \(or null\) when the call has none\./;
    const error = await rejectionOf(client.op.mutate({ id: 1 }));
    expect(error.data).toMatchObject({ code: 'INTERNAL_SERVER_ERROR', httpStatus: 500 });
    expect(error.message).toMatch(message);
    expectPlain500(errors[0], message);
    // without it, every caller would share the key "[object Object]"
    expect((await rejectionOf(client.op.mutate({ id: 2 }))).message).toMatch(message);
    expect(runs).toBe(0);
    expect(await client.op.mutate('job-1')).toBe(1);
    expect(await client.op.mutate('job-1')).toBe(1);
  });

  /**
   * tRPC's own WebSocket adapter (`applyWSSHandler`). The `ws` package is
   * not installed here, so the server and the socket are in-memory ones with the methods the handler uses (and the `send` and
   * `ping` of a `ws` WebSocket, by which the adapter recognises one).
   */
  class MemorySocket extends EventEmitter {
    readyState = 1;
    readonly received: {
      id: number | null;
      result?: unknown;
      error?: { message: string; data: Record<string, unknown> };
    }[] = [];
    send(data: string) {
      this.received.push(JSON.parse(data));
    }
    ping() {}
    close() {
      this.readyState = 3;
      this.emit('close');
    }
    terminate() {
      this.close();
    }
    call(id: number, path: string, input?: unknown) {
      this.emit('message', Buffer.from(JSON.stringify({ id, method: 'mutation', params: { path, input } })), false);
    }
  }

  it('a WebSocket without getKey, even when the connection carried the key header', async () => {
    let runs = 0;
    const router = t.router({
      op: withIdempotency(t.procedure, { scope: 'global', store: memoryStore() }).mutation(() => ++runs),
    });
    const errors: TRPCError[] = [];
    const wss = new EventEmitter();
    applyWSSHandler({
      wss: wss as never,
      router,
      createContext: ({ req, res }) => ({ req, res }) as never,
      onError: ({ error }) => errors.push(error),
    });
    const socket = new MemorySocket();
    wss.emit('connection', socket, {
      url: '/',
      method: 'GET',
      headers: { host: 'localhost', 'idempotency-key': randomUUID() },
    });
    socket.call(1, 'op');
    await expect.poll(() => socket.received.length).toBe(1);
    const { error } = socket.received[0]!;
    const message =
      /Procedure op: over a WebSocket the request headers are those of the connection, shared by all its calls, so they cannot carry a key per mutation\. Pass getKey/;
    expect(error?.data).toMatchObject({ code: 'INTERNAL_SERVER_ERROR', httpStatus: 500 });
    expect(error?.message).toMatch(message);
    expectPlain500(errors[0], message);
    expect(runs).toBe(0);
    socket.close();
  });
});

describe('engine and policy options are refused at creation, saying what to change', () => {
  it.each([
    [
      'storeTimeout past a timer limit',
      { storeTimeout: 30 * 86_400_000 },
      /storeTimeout must be a number of milliseconds above 0 to 2147483647 \(a Node\.js timer's limit, about 24\.8 days\), got the number 2592000000\./,
    ],
    [
      'lockTtl past a timer limit',
      { lockTtl: 2 ** 33, ttl: 2 ** 34 },
      /lockTtl must be a number of milliseconds above 0 to 2147483647 .*got the number 8589934592\./,
    ],
    [
      'maxRunTime past a timer limit',
      { maxRunTime: 2 ** 31 },
      /maxRunTime must be a number of milliseconds above 0 to 2147483647 .*got the number 2147483648\./,
    ],
    [
      'waitTimeout past a timer limit',
      { waitTimeout: 2 ** 31 },
      /waitTimeout must be a number of milliseconds from 0 to 2147483647/,
    ],
    [
      'storeTimeout longer than a third of lockTtl',
      { lockTtl: 300, storeTimeout: 1_000 },
      /storeTimeout \(1000 ms\) is more than a third of lockTtl \(300 ms\)\. .*Raise lockTtl or lower storeTimeout/,
    ],
    [
      'an excludeFields path',
      { excludeFields: ['clientTimestamp', 'meta.requestId'] },
      /excludeFields takes field names, each left out at any depth, not paths: "meta\.requestId" would exclude nothing\. Write "requestId"/,
    ],
    [
      'an empty excludeFields name',
      { excludeFields: [''] },
      /excludeFields must be an array of field names \(non-empty strings\)/,
    ],
    [
      'a store that is not one',
      { store: { claim: () => {} } },
      /store must implement the IdempotencyStore interface .*it has no complete, release, extend/,
    ],
    ['an onEvent that is not a function', { onEvent: 'log' }, /onEvent must be a function/],
    ['a clock that is not a function', { now: 5 }, /now must be a function/],
  ])('%s', (_name, options, message) => {
    expect(configErrorOf(() => createIdempotencyEngine(options as never)).message).toMatch(message);
    expect(configErrorOf(() => withIdempotency(t.procedure, { scope: 'global', ...options } as never)).message).toMatch(
      message,
    );
  });

  it('per procedure: the same limits, when .mutation() builds it', () => {
    const idem = withIdempotency(t.procedure, { scope: 'global', storeTimeout: 1_000 });
    expect(configErrorOf(() => idem.meta({ idempotency: { lockTtl: 300 } }).mutation(() => 1)).message).toMatch(
      /meta\.idempotency: storeTimeout \(1000 ms\) is more than a third of lockTtl \(300 ms\)/,
    );
    expect(
      configErrorOf(() => idem.meta({ idempotency: { excludeFields: ['a.b'] } }).mutation(() => 1)).message,
    ).toMatch(/Write "b"/);
  });

  it('without an explicit storeTimeout, a short lockTtl lowers the default (1 s) to lockTtl / 3', () => {
    expect(createIdempotencyEngine({ lockTtl: 300 }).defaults.storeTimeout).toBe(100);
    expect(createIdempotencyEngine().defaults.storeTimeout).toBe(1_000);
    expect(createIdempotencyEngine({ lockTtl: 3_000, storeTimeout: 1_000 }).defaults.storeTimeout).toBe(1_000);
    expect(createIdempotencyEngine().policy({ lockTtl: 600 }).storeTimeout).toBe(200);
  });

  it('memoryStore refuses a sweep interval a timer cannot keep', () => {
    expect(configErrorOf(() => memoryStore({ sweepInterval: 2 ** 31 })).message).toMatch(
      /memoryStore: sweepInterval must be a number of milliseconds above 0 to 2147483647 .*got the number 2147483648\./,
    );
  });
});

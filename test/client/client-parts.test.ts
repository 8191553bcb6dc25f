/**
 * The parts of the client entry that need no server: backoff, keys, headers,
 * error helpers, configuration errors, and the link's pass-through of queries
 * and subscriptions (a real tRPC client over a terminating link of our own).
 */
import {
  createTRPCUntypedClient,
  httpBatchLink,
  httpLink,
  type Operation,
  TRPCClientError,
  type TRPCLink,
} from '@trpc/client';
import type { AnyTRPCRouter } from '@trpc/server';
import { observable } from '@trpc/server/observable';
import { afterEach, describe, expect, expectTypeOf, it, vi } from 'vitest';
import {
  backoffDelay,
  createIdempotencyKey,
  DEFAULT_RETRY,
  getHttpStatus,
  getIdempotencyReason,
  getRetryAfterMs,
  IdempotencyConfigError,
  type IdempotencyRetryEvent,
  idempotencyHeaders,
  idempotencyLink,
  isIdempotencyError,
  isRetryableError,
  randomKey,
} from '../../src/client.js';
import { UUID_V4 } from '../helpers/client.js';

afterEach(() => {
  vi.unstubAllGlobals();
});

/** A terminating link that records each operation and answers with `answer(op)` (or never, for `'hang'`). */
function recordingLink(answer: (op: Operation) => unknown | 'hang' = () => 'ok') {
  const ops: Operation[] = [];
  let unsubscribed = 0;
  const link: TRPCLink<AnyTRPCRouter> =
    () =>
    ({ op }) =>
      observable((observer) => {
        ops.push(op);
        const result = answer(op);
        if (result instanceof Error) observer.error(TRPCClientError.from(result));
        else if (result !== 'hang') {
          observer.next({ result: { type: 'data', data: result } });
          observer.complete();
        }
        return () => {
          unsubscribed++;
        };
      });
  return { link, ops, unsubscribed: () => unsubscribed };
}

describe('backoffDelay', () => {
  it('is full jitter: random(0, min(cap, base * 2^(attempts-1)))', () => {
    const opts = { baseDelayMs: 100, maxDelayMs: 1_000 };
    expect(backoffDelay({ ...opts, attempts: 1, random: () => 0 })).toBe(0);
    expect(backoffDelay({ ...opts, attempts: 1, random: () => 0.5 })).toBe(50);
    expect(backoffDelay({ ...opts, attempts: 3, random: () => 0.5 })).toBe(200);
    expect(backoffDelay({ ...opts, attempts: 30, random: () => 0.999 })).toBe(999);
    expect(DEFAULT_RETRY).toEqual({ maxAttempts: 5, baseDelayMs: 500, maxDelayMs: 30_000 });
  });
});

describe('keys', () => {
  it('makes UUID v4 keys, with crypto.getRandomValues where randomUUID is missing (plain-HTTP pages)', () => {
    expect(randomKey()).toMatch(UUID_V4);
    const real = globalThis.crypto;
    vi.stubGlobal('crypto', { getRandomValues: <T extends Uint8Array>(a: T) => real.getRandomValues(a) });
    const keys = Array.from({ length: 50 }, () => randomKey());
    for (const key of keys) expect(key).toMatch(UUID_V4);
    expect(new Set(keys).size).toBe(50);
  });

  it('refuses to start without a way to make keys, and says what to do', () => {
    vi.stubGlobal('crypto', undefined);
    expect(() => idempotencyLink()).toThrow(IdempotencyConfigError);
    expect(() => idempotencyLink()).toThrow(/pass generateKey/);
    expect(() => createIdempotencyKey()).toThrow(/pass generateKey/);
    expect(() => createIdempotencyKey({ generateKey: 'k' as never })).toThrow(
      /createIdempotencyKey: generateKey must be a function that returns a key, got the string "k"\./,
    );
    let n = 0;
    expect(createIdempotencyKey({ generateKey: () => `k${++n}` }).current()).toBe('k1');
  });

  it('a holder keeps its key until reset, and settle() resets only when the outcome is known', () => {
    const key = createIdempotencyKey();
    expect(key.peek()).toBeUndefined();
    const first = key.current();
    expect(first).toMatch(UUID_V4);
    expect(key.current()).toBe(first);

    // TanStack hands out plain TRPCClientErrorLike objects: read by shape
    const unknownOutcomes = [
      TRPCClientError.from(new TypeError('fetch failed')),
      TRPCClientError.from(new DOMException('This operation was aborted', 'AbortError')),
      {
        message: 'in flight',
        data: { httpStatus: 409, code: 'CONFLICT', idempotency: { reason: 'in_progress', retryAfter: 1 } },
      },
      { message: 'boom', data: { httpStatus: 503 } },
    ];
    for (const error of unknownOutcomes) {
      key.settle(error);
      expect(key.peek()).toBe(first);
    }
    key.settle({ message: 'mismatch', data: { httpStatus: 422, idempotency: { reason: 'payload_mismatch' } } });
    expect(key.peek()).toBeUndefined();
    const second = key.current();
    key.settle({ message: 'no', data: { httpStatus: 403, code: 'FORBIDDEN' } });
    expect(key.peek()).toBeUndefined();
    expect(key.current()).not.toBe(second);
    const { reset } = key; // bound: `onSuccess: key.reset` works
    reset();
    expect(key.peek()).toBeUndefined();
  });
});

describe('idempotencyHeaders', () => {
  const mutation = (key: unknown, id = 1): Operation => ({
    id,
    type: 'mutation',
    path: 'pay',
    input: {},
    context: key === undefined ? {} : { idempotencyKey: key },
    signal: null,
  });

  it('writes Idempotency-Key for one call and Idempotency-Key-<i> per call of a batch, after your own headers', async () => {
    const single = idempotencyHeaders<{ op: Operation }>({
      headers: ({ op }) => ({ 'x-path': op.path, 'idempotency-KEY': 'stale' }),
    });
    expect(await single({ op: mutation('k1') })).toEqual({ 'x-path': 'pay', 'Idempotency-Key': 'k1' });

    const batch = idempotencyHeaders({ headers: new Headers({ authorization: 'Bearer t' }) });
    expect(await batch({ opList: [mutation('a'), mutation(undefined, 2), mutation('c', 3)] })).toEqual({
      authorization: 'Bearer t',
      'Idempotency-Key-0': 'a',
      'Idempotency-Key-2': 'c',
    });
    const query: Operation = { ...mutation('q'), type: 'query' };
    expect(await idempotencyHeaders({ header: 'X-Request-Key' })({ opList: [query, mutation('m')] })).toEqual({
      'X-Request-Key-1': 'm',
    });
  });

  it('fails loudly when a key holder reaches it unresolved (no idempotencyLink in the chain), or with a bad header name', async () => {
    await expect(idempotencyHeaders()({ op: mutation(createIdempotencyKey()) })).rejects.toThrow(
      /Put idempotencyLink\(\) before/,
    );
    expect(() => idempotencyHeaders({ header: 'Idempotency Key' })).toThrow(IdempotencyConfigError);
    expect(() => idempotencyHeaders({ header: 'Idempotency Key' })).toThrow(
      /idempotencyHeaders: header must be a header name \(letters, digits, dashes\) matching the server's, got the string "Idempotency Key"\./,
    );
  });

  it('types: fits httpLink ({ op }) and httpBatchLink ({ opList }) options', () => {
    httpLink({ url: 'http://x', headers: idempotencyHeaders({ headers: ({ op }) => ({ 'x-path': op.path }) }) });
    httpBatchLink({
      url: 'http://x',
      headers: idempotencyHeaders({ headers: ({ opList }) => ({ 'x-calls': String(opList.length) }) }),
    });
    httpLink({
      url: 'http://x',
      // @ts-expect-error httpLink gives { op }, not { opList }
      headers: idempotencyHeaders({ headers: ({ opList }) => ({ 'x-calls': String(opList.length) }) }),
    });
    expectTypeOf(idempotencyLink()).toEqualTypeOf<TRPCLink<AnyTRPCRouter>>();
    // @ts-expect-error maxAttempts is a number
    expect(() => idempotencyLink({ maxAttempts: '3' })).toThrow(IdempotencyConfigError);
  });
});

describe('idempotencyLink', () => {
  it('throws at creation on bad configuration, saying what is expected', () => {
    expect(() => idempotencyLink({ maxAttempts: 0 })).toThrow(
      /idempotencyLink: maxAttempts must be a whole number >= 1, got the number 0\./,
    );
    expect(() => idempotencyLink({ maxAttempts: 2.5 })).toThrow(IdempotencyConfigError);
    expect(() => idempotencyLink({ baseDelayMs: -1 })).toThrow(
      /idempotencyLink: baseDelayMs must be a number of milliseconds from 0 to 2147483647 .*, got the number -1\./,
    );
    expect(() => idempotencyLink({ maxDelayMs: 2 ** 31 })).toThrow(/maxDelayMs/);
    // @ts-expect-error onRetry is a function
    expect(() => idempotencyLink({ onRetry: 'log' })).toThrow(
      /idempotencyLink: onRetry must be a function, got the string "log"\./,
    );
    expect(() => idempotencyLink({ maxDelayMs: Number.NaN })).toThrow(/maxDelayMs/);
    expect(() => idempotencyLink({ timeoutMs: 0 })).toThrow(
      /idempotencyLink: timeoutMs must be a number of milliseconds above 0 to 2147483647 .*, got the number 0\./,
    );
    expect(() => idempotencyLink({ timeoutMs: Number.POSITIVE_INFINITY })).toThrow(/timeoutMs/);
  });

  it('passes queries and subscriptions through untouched, and gives mutations a new context', async () => {
    const transport = recordingLink();
    const client = createTRPCUntypedClient({ links: [idempotencyLink(), transport.link] });
    const context = { traceId: 't' };

    await client.query('list', undefined, { context });
    await new Promise<void>((resolve) => {
      client.subscription('events', undefined, { context, onComplete: resolve });
    });
    await client.mutation('pay', { amount: 1 }, { context });

    const [query, subscription, mutation] = transport.ops;
    expect(query!.context).toBe(context);
    expect(subscription!.context).toBe(context);
    expect(mutation!.context).not.toBe(context);
    expect(mutation!.context).toEqual({ traceId: 't', idempotencyKey: expect.stringMatching(UUID_V4) });
    expect(context).toEqual({ traceId: 't' });
  });

  it('refuses an invalid caller key without sending anything', async () => {
    const transport = recordingLink();
    const client = createTRPCUntypedClient({ links: [idempotencyLink(), transport.link] });
    await expect(client.mutation('pay', {}, { context: { idempotencyKey: 'é' } })).rejects.toThrow(
      /it contains a character that is not printable ASCII \(code 233 at position 0\)\. A key is 1 to 255 printable ASCII characters/,
    );
    await expect(client.mutation('pay', {}, { context: { idempotencyKey: 42 } })).rejects.toThrow(
      /a number, not a string/,
    );
    await expect(client.mutation('pay', {}, { context: { idempotencyKey: 'x'.repeat(256) } })).rejects.toThrow(
      /it is 256 characters long; the limit is 255\. A key is 1 to 255/,
    );
    expect(transport.ops).toEqual([]);
  });

  it('gives up an attempt after timeoutMs (unsubscribing it), up to maxAttempts, with one key', async () => {
    const transport = recordingLink(() => 'hang');
    const events: IdempotencyRetryEvent[] = [];
    const client = createTRPCUntypedClient({
      links: [
        idempotencyLink({ timeoutMs: 20, maxAttempts: 3, baseDelayMs: 1, onRetry: (e) => events.push(e) }),
        transport.link,
      ],
    });
    const error = (await client.mutation('pay', {}).then(
      () => undefined,
      (e: unknown) => e,
    )) as TRPCClientError<AnyTRPCRouter>;
    expect((error.cause as Error).name).toBe('TimeoutError');
    expect(transport.ops).toHaveLength(3);
    expect(transport.unsubscribed()).toBe(3);
    expect(new Set(transport.ops.map((op) => op.context.idempotencyKey)).size).toBe(1);
    expect(events.map((e) => e.attempts)).toEqual([1, 2]);
  });

  it('lets `retry` decide, and ignores an onRetry hook that throws', async () => {
    let calls = 0;
    const transport = recordingLink(() => (++calls < 3 ? new TypeError('fetch failed') : 'done'));
    const client = createTRPCUntypedClient({
      links: [
        idempotencyLink({
          baseDelayMs: 1,
          onRetry: () => {
            throw new Error('logging failed');
          },
        }),
        transport.link,
      ],
    });
    expect(await client.mutation('pay', {})).toBe('done');

    const never = recordingLink(() => new TypeError('fetch failed'));
    const noRetry = createTRPCUntypedClient({ links: [idempotencyLink({ retry: () => false }), never.link] });
    await expect(noRetry.mutation('pay', {})).rejects.toThrow('fetch failed');
    expect(never.ops).toHaveLength(1);
  });
});

describe('error helpers', () => {
  const headers = (value: string) => ({ get: (name: string) => (name === 'retry-after' ? value : null) });

  it('read the reason from data.idempotency, and the status from httpStatus, code or the response', () => {
    const conflict = { message: 'x', data: { httpStatus: 409, idempotency: { reason: 'in_progress', retryAfter: 2 } } };
    expect(isIdempotencyError(conflict)).toBe(true);
    expect(getIdempotencyReason(conflict)).toBe('in_progress');
    // a reason from a newer server is still an idempotency error, and final
    const newer = { data: { httpStatus: 500, idempotency: { reason: 'from_the_future' } } };
    expect(getIdempotencyReason(newer)).toBe('from_the_future');
    expect(isRetryableError(newer)).toBe(false);
    // a step whose result was not recorded released the key: retried; the server's step bugs are final
    const step = (reason: string) => ({ data: { httpStatus: 500, idempotency: { reason } } });
    expect(isRetryableError(step('step_unrecorded'))).toBe(true);
    expect(isRetryableError(step('step_mismatch'))).toBe(false);
    expect(isRetryableError(step('step_misuse'))).toBe(false);
    expect(isIdempotencyError({ data: { idempotency: { reason: 42 } } })).toBe(false);
    expect(isIdempotencyError(new Error('x'))).toBe(false);
    expect(getHttpStatus({ data: { code: 'GATEWAY_TIMEOUT' } })).toBe(504);
    expect(getHttpStatus({ meta: { response: { status: 502 } } })).toBe(502);
    expect(getHttpStatus({ meta: { response: { status: 207 } } })).toBeUndefined();
    expect(isRetryableError({ data: { code: 'UNPROCESSABLE_CONTENT' } })).toBe(false);
    expect(isRetryableError({ data: { httpStatus: 429 } })).toBe(true);
    // a 409 is the key in flight only with a Retry-After
    expect(isRetryableError({ data: { httpStatus: 409, code: 'CONFLICT' } })).toBe(false);
    expect(isRetryableError({ data: { httpStatus: 409 }, meta: { response: { headers: headers('1') } } })).toBe(true);
  });

  it('read Retry-After from data.idempotency, else from the header in seconds or as an HTTP date', () => {
    expect(getRetryAfterMs({ data: { httpStatus: 409, idempotency: { reason: 'in_progress', retryAfter: 2 } } })).toBe(
      2_000,
    );
    expect(getRetryAfterMs({ data: { httpStatus: 503 }, meta: { response: { headers: headers('3') } } })).toBe(3_000);
    const now = Date.parse('2025-01-01T00:00:00Z');
    const date = {
      data: { httpStatus: 429 },
      meta: { response: { headers: headers('Wed, 01 Jan 2025 00:00:05 GMT') } },
    };
    expect(getRetryAfterMs(date, now)).toBe(5_000);
    // a Retry-After on the response of another status (a batch) is not this call's
    expect(
      getRetryAfterMs({ data: { httpStatus: 500 }, meta: { response: { headers: headers('3') } } }),
    ).toBeUndefined();
  });

  it("recognise the layer's 409 in flight by its message where neither data.idempotency nor Retry-After reached the client", () => {
    // what a streamed batch, or an app's own error formatter with a `{ headers }` context, delivers
    const inFlight = {
      message: 'A request with this idempotency key is still being processed. Retry with the same key after 2 s.',
      data: { httpStatus: 409, code: 'CONFLICT' },
    };
    expect(isRetryableError(inFlight)).toBe(true);
    expect(getRetryAfterMs(inFlight)).toBe(2_000);
    const rolledBack = {
      message:
        'A request with this idempotency key is still being processed: the claim on this key expired while the operation ran, so its transaction was rolled back, and another request now holds the key. Retry with the same key after 1 s.',
      data: { code: 'CONFLICT' },
    };
    expect(isRetryableError(rolledBack)).toBe(true);
    expect(getRetryAfterMs(rolledBack)).toBe(1_000);
    // the procedure's own CONFLICT is an answer; and the sentence means nothing on another status
    expect(isRetryableError({ message: 'This email is already registered', data: { httpStatus: 409 } })).toBe(false);
    expect(getRetryAfterMs({ message: inFlight.message, data: { httpStatus: 400 } })).toBeUndefined();
    expect(isRetryableError({ message: inFlight.message, data: { httpStatus: 400 } })).toBe(false);
  });
});

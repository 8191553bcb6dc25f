/**
 * Hostile Idempotency-Key headers, property-based (fast-check), sent byte by
 * byte over TCP to a real tRPC HTTP server whose store is a private Redis:
 * random bytes, unicode, lengths 0 to 10,000, header injection. Every case
 * ends in a clear refusal (400 from the library or from Node's HTTP parser,
 * 431 for headers over Node's size limit) or in a correct run (once, then
 * replayed), the server never crashes, and an invalid key never reaches the
 * store: not one script call.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { initTRPC } from '@trpc/server';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type IdempotencyMeta, idempotencyErrorFormatter, withIdempotency } from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import { type RawResponse, rawRequest, sendRaw } from '../helpers/raw-http.js';
import { commandCalls, type PrivateRedis, startPrivateRedis } from '../helpers/redis-server.js';
import { startServer, type TestServer } from '../helpers/trpc.js';

let redisServer: PrivateRedis;
let redis: Redis;
let server: TestServer;
let port: number;
/** Per run (the X-Run header): the key header values the app received, and how often the procedure ran. */
const seen = new Map<string, string[] | undefined>();
const runs = new Map<string, number>();
let cases = 0;

beforeAll(async () => {
  redisServer = await startPrivateRedis();
  redis = new Redis({ port: redisServer.port });
  const t = initTRPC.meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });
  const runOf = (ctx: unknown) => String((ctx as { req: IncomingMessage }).req.headers['x-run']);
  // Each run is its own scope, so two runs that draw the same key never meet.
  const idempotent = withIdempotency(t.procedure, {
    store: redisStore({ client: redis, prefix: 'hk:' }),
    scope: ({ ctx }) => runOf(ctx),
  });
  const router = t.router({
    pay: idempotent.input(z.object({ amount: z.number() })).mutation(({ ctx, input }) => {
      runs.set(runOf(ctx), (runs.get(runOf(ctx)) ?? 0) + 1);
      return { chargeId: randomUUID(), amount: input.amount };
    }),
    health: t.procedure.query(() => 'ok'),
  });
  server = await startServer(router, ({ req }) => {
    seen.set(String(req.headers['x-run']), req.headersDistinct['idempotency-key']);
    return {};
  });
  port = Number(new URL(server.url).port);
  // loads the scripts, so that every later run costs exactly its own calls
  expect(
    (
      await sendRaw(
        port,
        rawRequest({
          path: '/pay',
          headers: [
            ['X-Run', 'warm-up'],
            ['Idempotency-Key', 'warm-up'],
          ],
          body: '{"amount":1}',
        }),
      )
    ).status,
  ).toBe(200);
});
afterAll(async () => {
  console.info(`[hostile keys] ${cases} property cases, each sent twice`);
  await server?.close();
  redis?.disconnect();
  await redisServer?.stop();
});

/**
 * What a correct server must make of the key header values it received:
 * written independently of the library, from the README's contract (a bare
 * value or a Structured Field string; 1 to 255 printable ASCII characters;
 * a header sent twice is refused).
 */
function expectedKey(values: string[] | undefined): string | 'missing' | 'invalid' {
  if (values === undefined || values.length === 0) return 'missing';
  if (values.length > 1) return 'invalid';
  let key = values[0]!;
  // an unquoted value with a comma is a list (the header sent twice joins that way): refused
  if (!key.startsWith('"') && key.includes(',')) return 'invalid';
  if (key.length >= 2 && key.startsWith('"')) {
    const quoted = /^"((?:[^"\\]|\\["\\])*)"$/s.exec(key);
    if (quoted === null) return 'invalid';
    key = quoted[1]!.replace(/\\(["\\])/g, '$1');
  }
  return /^[\x20-\x7e]{1,255}$/.test(key) ? key : 'invalid';
}

const scriptCalls = async () => {
  const calls = await commandCalls(redis);
  return (calls.evalsha ?? 0) + (calls.eval ?? 0);
};

function errorOf(response: RawResponse): { reason?: string; code?: string; message?: string } {
  try {
    const body = JSON.parse(response.body) as {
      error?: { message: string; data?: { code?: string; idempotency?: { reason: string } } };
    };
    return {
      reason: body.error?.data?.idempotency?.reason,
      code: body.error?.data?.code,
      message: body.error?.message,
    };
  } catch {
    return {};
  }
}

/**
 * Sends the key header `value` twice and checks every invariant. `intact`:
 * the value holds no line break, so the request reaches the app whole.
 */
async function check(value: string | Uint8Array, intact: boolean): Promise<void> {
  cases++;
  const run = randomUUID();
  const request = rawRequest({
    path: '/pay',
    headers: [
      ['X-Run', run],
      ['Idempotency-Key', value],
    ],
    body: '{"amount":7}',
  });
  const before = await scriptCalls();
  const first = await sendRaw(port, request);
  const calls = (await scriptCalls()) - before;
  const received = seen.get(run);
  const expected = expectedKey(received);
  const error = errorOf(first);
  // a client can never make a first answer look replayed
  expect(first.headers['idempotent-replayed']).toBeUndefined();

  if (first.status === 200) {
    expect(
      typeof expected === 'string' && expected !== 'missing' && expected !== 'invalid',
      `accepted ${JSON.stringify(received)}`,
    ).toBe(true);
    expect(calls).toBe(2); // claim, complete
    expect(runs.get(run)).toBe(1);
    const again = await sendRaw(port, request);
    expect(again.status).toBe(200);
    expect(again.headers['idempotent-replayed']).toEqual(['true']);
    expect(again.body).toBe(first.body);
    expect(runs.get(run)).toBe(1);
    return;
  }

  // Every refusal: nothing ran and the store was not touched.
  expect(calls, `store called for a refused key ${JSON.stringify(received)}`).toBe(0);
  expect(runs.get(run)).toBeUndefined();
  if (received === undefined) {
    // Node's HTTP parser refused the request before any application code: 400, or 431 when too large.
    expect([400, 431]).toContain(first.status);
  } else if (error.reason !== undefined) {
    expect(first.status).toBe(400);
    expect(error.reason).toBe(expected === 'missing' ? 'key_missing' : 'key_invalid');
    expect(expected === 'missing' || expected === 'invalid', `refused ${JSON.stringify(received)}`).toBe(true);
    expect(error.message).toMatch(/idempotency-key/i);
  } else {
    // Only when injected line breaks ended the headers early: the body is then not JSON (tRPC's
    // PARSE_ERROR), or the injected bytes form a second, malformed request that Node's parser
    // answers with a bare 400 before the first one is answered.
    expect(intact).toBe(false);
    expect(first.status).toBe(400);
    expect(error.code === 'PARSE_ERROR' || first.body === '', first.body).toBe(true);
  }
  // the same request again is refused the same way
  expect((await sendRaw(port, request)).status).toBe(first.status);
}

const printable = fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c));
const noLineBreak = (bytes: Uint8Array) => !bytes.includes(0x0a) && !bytes.includes(0x0d);

describe('the Idempotency-Key header, property-based', () => {
  it('random bytes: a clear refusal or a correct run, never a store call for an invalid key', async () => {
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ minLength: 0, maxLength: 400 }), (bytes) => check(bytes, noLineBreak(bytes))),
      { numRuns: 300 },
    );
  });

  it('unicode text, sent as UTF-8', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.string({ unit: 'binary', maxLength: 300 }), fc.string({ unit: 'grapheme', maxLength: 100 })),
        (text) => {
          const bytes = Buffer.from(text, 'utf8');
          return check(bytes, noLineBreak(bytes));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('lengths 0 to 10,000: printable ASCII up to 255 runs, anything longer is refused', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: 10_000 }).chain((n) => fc.string({ unit: printable, minLength: n, maxLength: n })),
        (text) => check(text, true),
      ),
      {
        numRuns: 200,
        examples: [[''], ['a'], ['k'.repeat(254)], ['k'.repeat(255)], ['k'.repeat(256)], ['k'.repeat(10_000)]],
      },
    );
  });

  // An injected Idempotency-Key-0 is in security.test.ts: on a non-batch request the server
  // currently reads it in place of Idempotency-Key (reported; see that file).
  it('header injection: line breaks, NUL, extra headers, a forged replay marker, early end of headers', async () => {
    const injections = [
      '\r\nIdempotent-Replayed: true',
      '\r\nIdempotency-Key: another',
      '\r\nidempotency-key: another',
      '\r\n\r\n',
      '\r\n\r\nPOST /pay HTTP/1.1\r\nHost: x\r\n',
      '\r\n ',
      '\n',
      '\r',
      '\0',
      '\r\nTransfer-Encoding: chunked',
      '\r\nContent-Length: 0',
      '\x0b',
      '\x7f',
      '"',
      '\\',
      ',',
    ];
    await fc.assert(
      fc.asyncProperty(
        fc.string({ unit: printable, maxLength: 40 }),
        fc.constantFrom(...injections),
        fc.string({ unit: printable, maxLength: 40 }),
        (before, injection, after) => check(`${before}${injection}${after}`, !/[\r\n]/.test(injection)),
      ),
      { numRuns: 300 },
    );
  });

  it('the server is still healthy after all of it', async () => {
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });
});

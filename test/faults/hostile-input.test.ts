/**
 * Inputs that stress the fingerprint, over HTTP against a real tRPC server
 * on a private Redis, and as properties (fast-check) of the canonical
 * encoding: deep nesting, huge arrays, keys named `__proto__`,
 * `constructor`, `prototype`, cycles and shared references rebuilt by a
 * transformer (superjson), nested Sets; and one tenant against another on
 * the memory store. A refused input never runs and never reaches the store.
 */
import { randomUUID } from 'node:crypto';
import { initTRPC } from '@trpc/server';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import superjson, { SuperJSON } from 'superjson';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { canonicalize, MAX_FINGERPRINT_DEPTH } from '../../src/core/fingerprint.js';
import { fingerprint } from '../../src/core.js';
import {
  IdempotencyError,
  type IdempotencyMeta,
  idempotencyErrorFormatter,
  retryable,
  steps,
  withIdempotency,
} from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import { memoryStore } from '../../src/stores/memory/store.js';
import { rawRequest, sendRaw } from '../helpers/raw-http.js';
import { commandCalls, type PrivateRedis, startPrivateRedis } from '../helpers/redis-server.js';
import { createClient, rejectionOf, startServer, type TestServer } from '../helpers/trpc.js';

let redisServer: PrivateRedis;
let redis: Redis;
const servers: TestServer[] = [];
let cases = 0;

beforeAll(async () => {
  redisServer = await startPrivateRedis();
  redis = new Redis({ port: redisServer.port });
});
afterAll(async () => {
  console.info(`[hostile input] ${cases} property cases`);
  await Promise.all(servers.map((s) => s.close()));
  redis?.disconnect();
  await redisServer?.stop();
});

const scriptCalls = async () => {
  const calls = await commandCalls(redis);
  return (calls.evalsha ?? 0) + (calls.eval ?? 0);
};

/** A server whose `pay` takes any `data`, fingerprinted with `excludeFields`. */
async function startDataServer(options: { transformer?: boolean; excludeFields?: string[] } = {}) {
  const t = initTRPC
    .meta<IdempotencyMeta>()
    .create({ errorFormatter: idempotencyErrorFormatter, ...(options.transformer ? { transformer: superjson } : {}) });
  const executions: unknown[] = [];
  const idempotent = withIdempotency(t.procedure, {
    scope: 'global',
    store: redisStore({ client: redis, prefix: `hi-${randomUUID().slice(0, 8)}:` }),
    excludeFields: options.excludeFields ?? [],
  });
  const router = t.router({
    pay: idempotent.input(z.object({ data: z.unknown() })).mutation(({ input }) => {
      executions.push(input.data);
      // echoed so replays can be compared, except huge arrays (they would exceed maxResponseBytes)
      const data = Array.isArray(input.data) && input.data.length > 1_000 ? input.data.length : input.data;
      return { chargeId: randomUUID(), data };
    }),
    health: t.procedure.query(() => 'ok'),
  });
  const server = await startServer(router);
  servers.push(server);
  return { ...server, router, executions, port: Number(new URL(server.url).port) };
}

/** A raw JSON body (so keys like `__proto__` are sent as they are written) to `pay`. */
async function postJson(port: number, key: string, body: string) {
  const response = await sendRaw(port, rawRequest({ path: '/pay', headers: [['Idempotency-Key', key]], body }));
  type ErrorShape = { message: string; data?: { idempotency?: { reason: string } } };
  const parsed = JSON.parse(response.body || '{}') as {
    result?: { data: unknown };
    error?: ErrorShape | { json: ErrorShape };
  };
  // with superjson, the error shape is wrapped in { json }
  const error = parsed.error !== undefined && 'json' in parsed.error ? parsed.error.json : parsed.error;
  return {
    status: response.status,
    replayed: response.headers['idempotent-replayed']?.[0] === 'true',
    body: response.body,
    data: parsed.result?.data,
    reason: error?.data?.idempotency?.reason,
    message: error?.message,
  };
}

const nestedArrays = (depth: number) => `{"data":${'['.repeat(depth)}1${']'.repeat(depth)}}`;
const nestedObjects = (depth: number) => `{"data":${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}}`;

describe('deep nesting', () => {
  it.each([
    ['arrays', 20_000, nestedArrays],
    ['arrays', 100_000, nestedArrays],
    ['objects', 20_000, nestedObjects],
    ['objects', 100_000, nestedObjects],
  ])(
    '%s nested %i levels over HTTP: a clear 400, no stack overflow, nothing run or stored',
    async (_kind, depth, build) => {
      const app = await startDataServer({ excludeFields: ['nonce'] });
      const before = await scriptCalls();
      const answer = await postJson(app.port, randomUUID(), build(depth));
      expect(answer).toMatchObject({ status: 400, reason: 'input_unsupported' });
      expect(answer.message).toMatch(new RegExp(`nested more than ${MAX_FINGERPRINT_DEPTH} levels`));
      expect(answer.body).not.toMatch(/call stack/i);
      expect(app.executions).toHaveLength(0);
      expect(await scriptCalls()).toBe(before);
      expect((await fetch(`${app.url}/health`)).status).toBe(200);
    },
  );

  it(`property: any mix of arrays, objects, Maps and Sets up to 1,500 deep fingerprints up to ${MAX_FINGERPRINT_DEPTH} levels and is refused beyond, never a RangeError`, () => {
    const kinds = fc.array(fc.constantFrom('array', 'object', 'map', 'set', '__proto__'), {
      minLength: 1,
      maxLength: 1_500,
    });
    fc.assert(
      fc.property(kinds, fc.boolean(), (path, withExclude) => {
        cases++;
        let value: unknown = 'leaf';
        for (const kind of path) {
          if (kind === 'array') value = [value];
          else if (kind === 'object') value = { a: value };
          else if (kind === 'map') value = new Map([['a', value]]);
          else if (kind === 'set') value = new Set([value]);
          else {
            // an own property named __proto__, as JSON.parse makes it
            const holder = JSON.parse('{"__proto__":0}') as Record<string, unknown>;
            Object.defineProperty(holder, '__proto__', { value, enumerable: true, writable: true, configurable: true });
            value = holder;
          }
        }
        const exclude = withExclude ? new Set(['nonce', 'constructor']) : undefined;
        let refused: unknown;
        try {
          fingerprint('op', value, exclude);
        } catch (error) {
          refused = error;
        }
        if (path.length > MAX_FINGERPRINT_DEPTH) {
          expect(refused).toBeInstanceOf(IdempotencyError);
          expect((refused as IdempotencyError).reason).toBe('input_unsupported');
        } else {
          expect(refused).toBeUndefined();
        }
      }),
      { numRuns: 200 },
    );
  });

  it('100,000 levels through the engine API directly: the same clear error', () => {
    let value: unknown = 1;
    for (let i = 0; i < 100_000; i++) value = { a: value };
    expect(() => fingerprint('op', value, new Set(['nonce']))).toThrow(IdempotencyError);
  });
});

describe('huge inputs', () => {
  it('an array of 200,000 elements over HTTP: runs once, replays, and a change in one element is a 422', async () => {
    const app = await startDataServer();
    const items = Array.from({ length: 200_000 }, (_, i) => i);
    const key = randomUUID();
    const first = await postJson(app.port, key, JSON.stringify({ data: items }));
    expect(first.status).toBe(200);
    const again = await postJson(app.port, key, JSON.stringify({ data: items }));
    expect(again).toMatchObject({ status: 200, replayed: true });
    expect(again.body).toBe(first.body);
    items[199_999] = -1;
    expect(await postJson(app.port, key, JSON.stringify({ data: items }))).toMatchObject({
      status: 422,
      reason: 'payload_mismatch',
    });
    expect(app.executions).toHaveLength(1);
  });

  it('3,000,000 elements and 200,000 keys in process: fingerprinted, and one changed value changes it', () => {
    const items = Array.from({ length: 3_000_000 }, (_, i) => i % 1_000);
    const fp = fingerprint('op', items);
    items[1_500_000] = -1;
    expect(fingerprint('op', items)).not.toBe(fp);
    const wide = Object.fromEntries(Array.from({ length: 200_000 }, (_, i) => [`k${i}`, i]));
    const reversed = Object.fromEntries(Object.entries(wide).reverse());
    expect(fingerprint('op', reversed)).toBe(fingerprint('op', wide));
  });
});

describe('keys named __proto__, constructor, prototype', () => {
  const special = [
    '__proto__',
    'constructor',
    'prototype',
    'toString',
    'hasOwnProperty',
    'valueOf',
    '__defineGetter__',
    'a',
    'b',
  ];
  /** JSON text of an object tree whose keys are drawn from `special`: JSON.parse makes each an own property. */
  const jsonText: fc.Arbitrary<string> = fc.letrec<{ node: string }>((tie) => ({
    node: fc.oneof(
      { depthSize: 'small' },
      fc.oneof(fc.integer(), fc.string(), fc.boolean(), fc.constant(null)).map((v) => JSON.stringify(v)),
      fc.array(tie('node'), { maxLength: 4 }).map((items) => `[${items.join(',')}]`),
      fc
        .uniqueArray(fc.tuple(fc.constantFrom(...special), tie('node')), { maxLength: 5, selector: ([k]) => k })
        .map((entries) => `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`),
    ),
  })).node;
  const exclusions = fc.subarray(special);

  const prototypesIntact = () => {
    expect(Object.getOwnPropertyNames(Object.prototype).sort()).toEqual(objectProtoNames);
    expect(Object.getOwnPropertyNames(Array.prototype).sort()).toEqual(arrayProtoNames);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  };
  const objectProtoNames = Object.getOwnPropertyNames(Object.prototype).sort();
  const arrayProtoNames = Object.getOwnPropertyNames(Array.prototype).sort();

  it('property: canonicalising and stripping excluded fields pollutes no prototype, ignores key order, and keeps __proto__ as data', () => {
    fc.assert(
      fc.property(jsonText, jsonText, jsonText, exclusions, (inner, x, y, excluded) => {
        cases++;
        const exclude = new Set(excluded);
        const value: unknown = JSON.parse(inner);
        canonicalize(value, exclude);
        fingerprint('op', value, exclude);
        prototypesIntact();
        // the same entries in another order: the same fingerprint
        const forward = JSON.parse(`{"__proto__":${x},"constructor":${y},"data":${inner}}`) as unknown;
        const backward = JSON.parse(`{"data":${inner},"constructor":${y},"__proto__":${x}}`) as unknown;
        expect(fingerprint('op', backward, exclude)).toBe(fingerprint('op', forward, exclude));
        // a different value under __proto__ is a different payload, unless that field is excluded
        if (
          x !== y &&
          !exclude.has('__proto__') &&
          canonicalize(JSON.parse(x), exclude) !== canonicalize(JSON.parse(y), exclude)
        ) {
          const other = JSON.parse(`{"__proto__":${y},"constructor":${y},"data":${inner}}`) as unknown;
          expect(fingerprint('op', other, exclude)).not.toBe(fingerprint('op', forward, exclude));
        }
        // a __proto__ field is never confused with its absence
        if (!exclude.has('__proto__')) {
          expect(fingerprint('op', JSON.parse(`{"data":${inner}}`), exclude)).not.toBe(
            fingerprint('op', forward, exclude),
          );
        }
        prototypesIntact();
      }),
      { numRuns: 300 },
    );
  });

  it('over HTTP: __proto__ and constructor payloads run once, are compared as data, replayed as data, and pollute nothing', async () => {
    const app = await startDataServer({ excludeFields: ['prototype'] });
    const key = randomUUID();
    const body = (polluted: string, proto: string) =>
      `{"data":{"__proto__":{"polluted":"${polluted}"},"constructor":{"prototype":{"polluted":"${proto}"}},"amount":1}}`;
    const first = await postJson(app.port, key, body('yes', 'yes'));
    expect(first.status).toBe(200);
    expect(first.body).toContain('"__proto__":{"polluted":"yes"}');
    prototypesIntact();
    // another value under __proto__: another payload
    expect(await postJson(app.port, key, body('other', 'yes'))).toMatchObject({
      status: 422,
      reason: 'payload_mismatch',
    });
    // `prototype` is excluded, at any depth: a change there is the same operation
    const replay = await postJson(app.port, key, body('yes', 'changed'));
    expect(replay).toMatchObject({ status: 200, replayed: true });
    expect(replay.body).toBe(first.body);
    expect(app.executions).toHaveLength(1);
    prototypesIntact();
  });
});

describe('cycles rebuilt by a transformer (superjson)', () => {
  it('a cyclic input sent by a superjson client: a clear 400, nothing run or stored; a shared (acyclic) reference is fine', async () => {
    const app = await startDataServer({ transformer: true });
    const client = createClient<typeof app.router>(app.url, { transformer: superjson });
    const cyclic: Record<string, unknown> = { amount: 1 };
    cyclic.self = cyclic;
    const before = await scriptCalls();
    const error = await rejectionOf(client.pay.mutate({ data: cyclic }, { context: { key: randomUUID() } }));
    expect(error.data).toMatchObject({ httpStatus: 400, idempotency: { reason: 'input_unsupported' } });
    expect(error.message).toMatch(/cycle/);
    expect(await scriptCalls()).toBe(before);
    expect(app.executions).toHaveLength(0);

    const shared = { amount: 2 };
    const key = randomUUID();
    const first = await client.pay.mutate({ data: { a: shared, b: shared } }, { context: { key } });
    expect(await client.pay.mutate({ data: { a: shared, b: shared } }, { context: { key } })).toEqual(first);
    expect(app.executions).toHaveLength(1);
  });

  it('a cycle crafted in the raw superjson wire format (referentialEqualities): the same clear 400', async () => {
    const app = await startDataServer({ transformer: true });
    const body = JSON.stringify({
      json: { data: { a: { n: 1 }, b: null } },
      meta: { referentialEqualities: { 'data.a': ['data.a.self', 'data.b'] } },
    });
    const answer = await postJson(app.port, randomUUID(), body);
    expect(answer).toMatchObject({ status: 400, reason: 'input_unsupported' });
    expect(answer.message).toMatch(/cycle/);
    expect(app.executions).toHaveLength(0);
  });

  it('20,000 levels through superjson: the transformer overflows before the library sees the input; refused, nothing run, the server lives', async () => {
    const app = await startDataServer({ transformer: true });
    const before = await scriptCalls();
    const answer = await postJson(app.port, randomUUID(), `{"json":${nestedObjects(20_000)}}`);
    expect(answer.status).toBeGreaterThanOrEqual(400);
    expect(app.executions).toHaveLength(0);
    expect(await scriptCalls()).toBe(before);
    expect((await fetch(`${app.url}/health`)).status).toBe(200);
    console.info(`[hostile input] 20,000 levels through superjson: ${answer.status} ${answer.message}`);
  });
});

describe('shared references and nested Sets through superjson, over HTTP', () => {
  /** One object under both fields of the level above, `depth` times: 2^depth paths, as superjson's dedupe writes it once. */
  const sharedTwice = (depth: number) => {
    let node: unknown = { leaf: 1 };
    for (let i = 0; i < depth; i++) node = { left: node, right: node };
    return node;
  };
  const nestedSets = (depth: number, pad: number) => {
    let value: unknown = 'x'.repeat(pad);
    for (let i = 0; i < depth; i++) value = new Set([value, `${i}:${'s'.repeat(pad)}`]);
    return value;
  };

  /** Health checks sent one after another until `stop`, each with a deadline; what each answered. */
  function keepChecking(url: string) {
    const answers: number[] = [];
    let running = true;
    const done = (async () => {
      while (running) {
        const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(5_000) });
        answers.push(response.status);
        await response.arrayBuffer();
      }
    })();
    return {
      answers,
      stop: async () => {
        running = false;
        await done;
      },
    };
  }

  it('a 4 KB body sharing one object 2^23 ways, sent 20 times: a clear 400 each, health answered throughout, nothing run or stored', async () => {
    const app = await startDataServer({ transformer: true });
    const body = new SuperJSON({ dedupe: true }).stringify({ data: sharedTwice(23) });
    expect(body.length).toBeLessThan(4_000);
    const before = await scriptCalls();
    const heapBefore = process.memoryUsage().heapUsed;
    const health = keepChecking(app.url);
    const answers = await Promise.all(Array.from({ length: 20 }, () => postJson(app.port, randomUUID(), body)));
    await health.stop();
    for (const answer of answers) {
      expect(answer).toMatchObject({ status: 400, reason: 'input_unsupported' });
      expect(answer.message).toMatch(/shared references/);
    }
    expect(health.answers.length).toBeGreaterThan(0);
    expect(health.answers.every((status) => status === 200)).toBe(true);
    expect(app.executions).toHaveLength(0);
    expect(await scriptCalls()).toBe(before);
    // Walked path by path, one such body took the heap past 2 GB; encoded once per object, it takes nothing to speak of.
    expect(process.memoryUsage().heapUsed - heapBefore).toBeLessThan(256 * 1024 * 1024);
  });

  it('a body sharing one object 2^12 ways (fingerprinted, not refused): runs once, replays, and equals its copy sent without sharing', async () => {
    const app = await startDataServer({ transformer: true });
    const client = createClient<typeof app.router>(app.url, { transformer: superjson });
    const key = randomUUID();
    const data = sharedTwice(12);
    const first = await client.pay.mutate({ data }, { context: { key } });
    // the same value sent as a tree (no shared reference): the same payload
    expect(await client.pay.mutate({ data: JSON.parse(JSON.stringify(data)) }, { context: { key } })).toEqual(first);
    expect(app.executions).toHaveLength(1);
  });

  it('a 1 MB body of 500 nested two-element Sets: runs once, replays, another innermost value is a 422; health answered throughout', async () => {
    const app = await startDataServer({ transformer: true });
    const client = createClient<typeof app.router>(app.url, { transformer: superjson });
    const data = nestedSets(500, 2_000);
    expect(superjson.stringify({ data }).length).toBeGreaterThan(1_000_000);
    const health = keepChecking(app.url);
    const key = randomUUID();
    const first = await client.pay.mutate({ data }, { context: { key } });
    expect(await client.pay.mutate({ data: nestedSets(500, 2_000) }, { context: { key } })).toEqual(first);
    const other = await rejectionOf(client.pay.mutate({ data: nestedSets(500, 1_999) }, { context: { key } }));
    await health.stop();
    expect(other.data).toMatchObject({ httpStatus: 422, idempotency: { reason: 'payload_mismatch' } });
    expect(app.executions).toHaveLength(1);
    expect(health.answers.length).toBeGreaterThan(0);
    expect(health.answers.every((status) => status === 200)).toBe(true);
  });
});

describe('tenant eviction (memory store)', () => {
  type Ctx = { req: { headers: Record<string, string | string[] | undefined> } };

  /** A server whose `pay` is scoped by the x-user-id header, on a bounded memory store. */
  async function startTenantServer(options: { maxEntries: number; maxBytes?: number }) {
    const t = initTRPC.context<Ctx>().meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });
    const store = memoryStore(options);
    const runs = new Map<string, number>();
    let charges = 0;
    const reserved: number[] = [];
    const userOf = (ctx: Ctx) => String(ctx.req.headers['x-user-id']);
    const idempotent = withIdempotency(t.procedure, { store, scope: ({ ctx }) => userOf(ctx) });
    const router = t.router({
      pay: idempotent
        .input(z.object({ amount: z.number(), receiptChars: z.number().int().max(1_000_000).default(0) }))
        .mutation(({ ctx, input }) => {
          const user = userOf(ctx);
          runs.set(user, (runs.get(user) ?? 0) + 1);
          return { chargeId: `ch_${++charges}`, receipt: '.'.repeat(input.receiptChars) };
        }),
      // docs/steps.md's pattern: a step (reserve the stock), then a declined card gives the key back
      order: idempotent.input(z.object({ item: z.number() })).mutation(async (opts) => {
        await steps(opts).step('reserve', async () => ({ reserved: reserved.push(opts.input.item) }));
        throw retryable(new Error('The card was declined: retry with the same key once the card is updated.'));
      }),
      health: t.procedure.query(() => 'ok'),
    });
    const server = await startServer(router);
    servers.push(server);
    return { ...server, router, store, runs, reserved };
  }

  type App = Awaited<ReturnType<typeof startTenantServer>>;

  const pay = async (app: App, user: string, key: string, receiptChars = 0) => {
    const response = await fetch(`${app.url}/pay`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-user-id': user },
      body: JSON.stringify({ amount: 1, receiptChars }),
    });
    const body = (await response.json()) as { result?: { data: { chargeId: string } } };
    return { status: response.status, chargeId: body.result?.data.chargeId };
  };

  /** The attack, `concurrency` requests at a time, while a health check polls the server and the store's accounting is sampled. */
  async function attack(app: App, requests: number, concurrency: number, receiptChars: number) {
    const statuses = new Map<number, number>();
    const health: number[] = [];
    let most = { size: 0, bytes: 0 };
    let done = false;
    const poll = (async () => {
      while (!done) {
        health.push((await fetch(`${app.url}/health`)).status);
        most = { size: Math.max(most.size, app.store.size), bytes: Math.max(most.bytes, app.store.bytes) };
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < requests) {
          const { status } = await pay(app, 'attacker', `fresh-${next++}`, receiptChars);
          statuses.set(status, (statuses.get(status) ?? 0) + 1);
        }
      }),
    );
    done = true;
    await poll;
    return { statuses, health, most };
  }

  /** The victim's charge through a real tRPC client, and its retry with the same key after the attack. */
  async function victimSurvives(app: App, during: () => Promise<void>) {
    const seen: Headers[] = [];
    const client = createClient<App['router']>(app.url, { seen });
    const context = { key: randomUUID(), headers: { 'x-user-id': 'victim' } };
    const first = await client.pay.mutate({ amount: 4200 }, { context });
    expect(first.chargeId).toMatch(/^ch_/);
    expect(seen.at(-1)?.get('idempotent-replayed')).toBeNull();
    await during();
    const retry = await client.pay.mutate({ amount: 4200 }, { context });
    expect(retry.chargeId).toBe(first.chargeId); // charged once
    expect(seen.at(-1)?.get('idempotent-replayed')).toBe('true');
    expect(app.runs.get('victim')).toBe(1);
  }

  it('1,200 cheap mutations with fresh keys in one scope (maxEntries 1,000) evict only that scope: the victim retry is replayed', async () => {
    const app = await startTenantServer({ maxEntries: 1_000 });
    await victimSurvives(app, async () => {
      const { statuses, health, most } = await attack(app, 1_200, 4, 0);
      expect(Object.fromEntries(statuses)).toEqual({ 200: 1_200 });
      expect(health.length).toBeGreaterThan(0);
      expect(health.every((status) => status === 200)).toBe(true);
      expect(most.size).toBeLessThanOrEqual(1_000);
      expect(app.store.size).toBe(1_000);
    });
    expect(app.runs.get('attacker')).toBe(1_200);
  });

  it('claims released with a step each (a step, then retryable()) in one scope: a new tenant still pays, and another tenant earlier payment is not charged again', async () => {
    const app = await startTenantServer({ maxEntries: 50 });
    const first = await pay(app, 'victim', 'k1');
    expect(first).toEqual({ status: 200, chargeId: 'ch_1' });
    const statuses = new Map<number, number>();
    for (let i = 0; i < 75; i++) {
      const response = await fetch(`${app.url}/order`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': `order-${i}`, 'x-user-id': 'attacker' },
        body: JSON.stringify({ item: i }),
      });
      await response.body?.cancel();
      statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
    }
    // every order ran its step and was given back (declined), none refused for room
    expect(Object.fromEntries(statuses)).toEqual({ 500: 75 });
    expect(app.reserved).toHaveLength(75);
    expect(app.store.size).toBeLessThanOrEqual(50);
    // a tenant with nothing stored pays; the victim pays again with a new key, then retries its first payment
    expect(await pay(app, 'newcomer', 'n1')).toEqual({ status: 200, chargeId: 'ch_2' });
    expect(await pay(app, 'victim', 'k2')).toEqual({ status: 200, chargeId: 'ch_3' });
    expect(await pay(app, 'victim', 'k1')).toEqual({ status: 200, chargeId: 'ch_1' }); // charged once
    expect(app.runs.get('victim')).toBe(2);
  });

  it('outcomes of about 1 MB in one scope (maxBytes 8 MiB) evict only that scope, and the store stays within its byte budget', async () => {
    const maxBytes = 8 * 1024 * 1024;
    const concurrency = 3;
    const receiptChars = 1_000_000;
    const app = await startTenantServer({ maxEntries: 1_000, maxBytes });
    await victimSurvives(app, async () => {
      const { statuses, health, most } = await attack(app, 40, concurrency, receiptChars);
      expect(Object.fromEntries(statuses)).toEqual({ 200: 40 });
      expect(health.every((status) => status === 200)).toBe(true);
      // the documented bound: beyond maxBytes by at most the outcomes of the claims running
      expect(most.bytes).toBeLessThanOrEqual(maxBytes + concurrency * (receiptChars + 1_000));
      expect(app.store.bytes).toBeLessThanOrEqual(maxBytes);
      expect(app.store.bytes).toBeGreaterThan(maxBytes / 2); // the budget is used, not a few records
    });
  });
});

/**
 * The client link end to end: a real tRPC HTTP server, a real client with
 * idempotencyLink + idempotencyHeaders, a real TCP proxy where the network
 * has to fail, on the memory store and on Redis.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  createIdempotencyKey,
  getHttpStatus,
  getIdempotencyReason,
  isAbortError,
  isIdempotencyError,
  isRetryableError,
} from '../../src/client.js';
import { type IdempotencyStore, memoryStore } from '../../src/index.js';
import { redisStore } from '../../src/redis.js';
import {
  createIdempotentClient,
  keyHeaders,
  type PaymentsServer,
  type PaymentsServerOptions,
  startPaymentsServer,
  UUID_V4,
  until,
} from '../helpers/client.js';
import { type DropProxy, startDropProxy } from '../helpers/drop-proxy.js';
import { connectRedis, deleteByPrefix, uniquePrefix } from '../helpers/redis.js';
import { gate, rejectionOf } from '../helpers/trpc.js';

const redis = connectRedis();
const prefix = uniquePrefix('client');
afterAll(async () => {
  await deleteByPrefix(redis, prefix);
  redis.disconnect();
});

const stores: [string, () => IdempotencyStore][] = [
  ['memory', () => memoryStore()],
  ['redis', () => redisStore({ client: redis, prefix })],
];

const closing: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(closing.splice(0).map((c) => c.close()));
});

describe.each(stores)('idempotencyLink on the %s store', (_name, makeStore) => {
  async function serve(options: PaymentsServerOptions = {}): Promise<PaymentsServer> {
    const server = await startPaymentsServer(makeStore(), options);
    closing.push(server);
    return server;
  }
  async function dropProxy(server: PaymentsServer, drop = 1): Promise<DropProxy> {
    const proxy = await startDropProxy({ targetUrl: server.url, drop });
    closing.push(proxy);
    return proxy;
  }

  it('retries with the same key when the response of a completed call is lost, gets the replay, and the procedure ran once', async () => {
    const server = await serve();
    const proxy = await dropProxy(server);
    const { trpc, retries, responses } = createIdempotentClient(server, { url: proxy.url });

    const charge = await trpc.pay.mutate({ amount: 1200 });

    expect(proxy.dropped).toBe(1);
    expect(server.runs('pay')).toHaveLength(1);
    expect(charge.amount).toBe(1200);
    // the first attempt failed without an HTTP status: a network failure, retried
    expect(retries).toHaveLength(1);
    expect(getHttpStatus(retries[0]!.error)).toBeUndefined();
    const keys = server.requests.map((r) => r.headers['idempotency-key']);
    expect(keys).toHaveLength(2);
    expect(keys[0]).toMatch(UUID_V4);
    expect(keys[1]).toBe(keys[0]);
    expect(retries[0]!.key).toBe(keys[0]);
    expect(responses).toHaveLength(1);
    expect(responses[0]!.get('idempotent-replayed')).toBe('true');
  });

  it('a slow first call: the attempt times out, the retry meets 409, waits per Retry-After, then gets the stored result', async () => {
    const server = await serve();
    const release = gate();
    server.holdPayments(release.opened);
    const { trpc, retries, responses } = createIdempotentClient(server, {
      link: {
        timeoutMs: 500,
        maxAttempts: 10, // room for an extra timeout on a loaded machine
        // let the first call finish while the client waits out the 409
        onRetry: ({ error }) => getHttpStatus(error) === 409 && release.open(),
      },
    });

    const charge = await trpc.pay.mutate({ amount: 50 });

    expect(server.runs('pay')).toHaveLength(1);
    expect(charge.amount).toBe(50);
    const conflict = retries.at(-1)!;
    const timedOut = retries.slice(0, -1);
    expect(timedOut.length).toBeGreaterThanOrEqual(1);
    for (const { error } of timedOut) expect((error.cause as Error | undefined)?.name).toBe('TimeoutError');
    expect(getHttpStatus(conflict.error)).toBe(409);
    expect(getIdempotencyReason(conflict.error)).toBe('in_progress');
    expect(conflict.delayMs).toBeGreaterThanOrEqual(1_000);
    // the server saw the last attempt no earlier than Retry-After (1 s) after the one that met 409
    const [beforeLast, last] = server.requests.slice(-2);
    expect(last!.at - beforeLast!.at).toBeGreaterThanOrEqual(950);
    expect(new Set(server.requests.map((r) => r.headers['idempotency-key'])).size).toBe(1);
    expect(responses.at(-1)!.get('idempotent-replayed')).toBe('true');
  });

  it('a batch of three mutations carries three keys, one indexed header per call, and each runs once though the batch response is lost', async () => {
    const server = await serve();
    const proxy = await dropProxy(server);
    const { trpc, responses } = createIdempotentClient(server, {
      url: proxy.url,
      transport: 'batch',
      link: { random: () => 0 },
    });

    const charges = await Promise.all([1, 2, 3].map((amount) => trpc.pay.mutate({ amount })));

    expect(charges.map((c) => c.amount)).toEqual([1, 2, 3]);
    expect(
      server
        .runs('pay')
        .map((e) => (e.input as { amount: number }).amount)
        .sort(),
    ).toEqual([1, 2, 3]);
    const [first, ...later] = server.requests;
    expect(first!.url).toContain('batch=1');
    expect(Object.keys(keyHeaders(first!)).sort()).toEqual([
      'idempotency-key-0',
      'idempotency-key-1',
      'idempotency-key-2',
    ]);
    const keys = Object.values(keyHeaders(first!));
    expect(new Set(keys).size).toBe(3);
    for (const key of keys) expect(key).toMatch(UUID_V4);
    // the retries, batched again or not, send each call's own key and no other
    expect(later.flatMap((r) => Object.values(keyHeaders(r))).sort()).toEqual([...keys].sort());
    const replayed = responses.flatMap((h) => [...h.keys()].filter((name) => name.startsWith('idempotent-replayed-')));
    expect(replayed).toHaveLength(3);
  });

  it('never retries 400, 401, 403, 422, nor a 409 the procedure threw itself', async () => {
    const server = await serve();
    const { trpc, retries } = createIdempotentClient(server);
    const key = randomUUID();
    await trpc.pay.mutate({ amount: 10 }, { context: { idempotencyKey: key } });

    const mismatch = await rejectionOf(trpc.pay.mutate({ amount: 11 }, { context: { idempotencyKey: key } }));
    const invalidInput = await rejectionOf(trpc.pay.mutate({ amount: -1 }));
    const unauthorized = await rejectionOf(trpc.refuse.mutate({ code: 'UNAUTHORIZED' }));
    const forbidden = await rejectionOf(trpc.refuse.mutate({ code: 'FORBIDDEN' }));
    const badRequest = await rejectionOf(trpc.refuse.mutate({ code: 'BAD_REQUEST' }));
    server.failures.push('CONFLICT'); // "already exists": an answer, not a key in flight
    const conflict = await rejectionOf(trpc.flaky.mutate({ n: 1 }));

    expect([mismatch, invalidInput, unauthorized, forbidden, badRequest, conflict].map(getHttpStatus)).toEqual([
      422, 400, 401, 403, 400, 409,
    ]);
    expect(isIdempotencyError(mismatch)).toBe(true);
    expect(getIdempotencyReason(mismatch)).toBe('payload_mismatch');
    expect(isIdempotencyError(forbidden)).toBe(false);
    expect(retries).toEqual([]);
    expect(server.requests).toHaveLength(7);
    expect(server.runs('pay')).toHaveLength(1);
    expect(server.runs('flaky')).toHaveLength(1);
  });

  it('retries 500, 502, 503 and 504 with the same key, up to maxAttempts', async () => {
    const server = await serve();
    server.failures.push('INTERNAL_SERVER_ERROR', 'BAD_GATEWAY', 'SERVICE_UNAVAILABLE', 'GATEWAY_TIMEOUT');
    const { trpc, retries } = createIdempotentClient(server, { link: { maxAttempts: 5 } });

    expect(await trpc.flaky.mutate({ n: 7 })).toEqual({ ok: 7 });
    expect(retries.map((r) => getHttpStatus(r.error))).toEqual([500, 502, 503, 504]);
    expect(retries.map((r) => r.attempts)).toEqual([1, 2, 3, 4]);
    // each 5xx released the key, so each retry ran the procedure again, with the same key
    expect(server.runs('flaky')).toHaveLength(5);
    expect(new Set(server.requests.map((r) => r.headers['idempotency-key'])).size).toBe(1);

    server.failures.push('SERVICE_UNAVAILABLE', 'SERVICE_UNAVAILABLE');
    const limited = createIdempotentClient(server, { link: { maxAttempts: 2 } });
    const error = await rejectionOf(limited.trpc.flaky.mutate({ n: 8 }));
    expect(getHttpStatus(error)).toBe(503);
    expect(limited.retries).toHaveLength(1);
  });

  it('an abort stops the retries: during the wait, and at once during a batched request', async () => {
    const server = await serve();
    server.failures.push('SERVICE_UNAVAILABLE', 'SERVICE_UNAVAILABLE', 'SERVICE_UNAVAILABLE');
    const controller = new AbortController();
    // without the abort, the retry would be sent after a wait of 0 ms: its timer armed before the call failed
    const waiting = createIdempotentClient(server, {
      link: { baseDelayMs: 0, onRetry: () => controller.abort() },
    });
    const aborted = await rejectionOf(waiting.trpc.flaky.mutate({ n: 1 }, { signal: controller.signal }));
    expect(isAbortError(aborted)).toBe(true);
    expect(isRetryableError(aborted)).toBe(false);
    expect(waiting.retries.map((r) => r.delayMs)).toEqual([0]);
    // A timer armed now fires after any the link armed before (same delay, in order), and a retry is
    // sent within its timer's own callback: had one been scheduled, it would be counted by now.
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(waiting.attempts()).toBe(1);
    expect(server.runs('flaky')).toHaveLength(1);

    // A batch request is only aborted once all its calls are; the link still rejects the aborted call at once.
    const release = gate();
    server.holdPayments(release.opened);
    const batched = createIdempotentClient(server, { transport: 'batch' });
    const inFlight = new AbortController();
    const kept = batched.trpc.pay.mutate({ amount: 2 });
    const cancelled = batched.trpc.pay.mutate({ amount: 1 }, { signal: inFlight.signal });
    let settled = false;
    const cancelledError = rejectionOf(cancelled).finally(() => (settled = true));
    await until(() => server.runs('pay').length === 2);
    inFlight.abort();
    await expect.poll(() => settled).toBe(true); // while the server still holds both calls
    expect(isAbortError(await cancelledError)).toBe(true);
    release.open();
    expect((await kept).amount).toBe(2);
    expect(batched.retries).toEqual([]);
  });

  it('sends the key the caller supplies (a string or a holder), and the server stores the outcome under it', async () => {
    const server = await serve();
    const { trpc } = createIdempotentClient(server, { transport: 'batch' });
    const key = `order-42:${randomUUID()}`;
    const holder = createIdempotencyKey();

    const [generated, supplied, held] = await Promise.all([
      trpc.pay.mutate({ amount: 1 }),
      trpc.pay.mutate({ amount: 2 }, { context: { idempotencyKey: key } }),
      trpc.pay.mutate({ amount: 3 }, { context: { idempotencyKey: holder } }),
    ]);

    expect(server.requests).toHaveLength(1);
    const headers = keyHeaders(server.requests[0]!);
    expect(headers['idempotency-key-0']).toMatch(UUID_V4);
    expect(headers['idempotency-key-1']).toBe(key);
    expect(headers['idempotency-key-2']).toBe(holder.peek());
    // another client, plain HTTP, same key and payload: the stored outcome is replayed
    const response = await fetch(`${server.url}/pay`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ amount: 2 }),
    });
    expect(response.headers.get('idempotent-replayed')).toBe('true');
    expect(((await response.json()) as { result: { data: unknown } }).result.data).toEqual(supplied);
    expect(server.runs('pay')).toHaveLength(3);
    expect(generated.chargeId).not.toBe(held.chargeId);
  });

  it('sends a key with a comma or a leading quote as a quoted string, which the server reads back as the same key', async () => {
    const server = await serve();
    const { trpc } = createIdempotentClient(server, { transport: 'batch' });
    const id = randomUUID();
    const keys = [`order-7,line-2:${id}`, `"quoted\\${id}`];
    const first = await Promise.all(
      keys.map((key, i) => trpc.pay.mutate({ amount: 10 + i }, { context: { idempotencyKey: key } })),
    );
    const headers = keyHeaders(server.requests[0]!);
    expect(headers['idempotency-key-0']).toBe(`"${keys[0]}"`);
    expect(headers['idempotency-key-1']).toBe(`"\\"quoted\\\\${id}"`);
    // the same keys again: replayed, so the server stored them under the keys themselves
    const again = await Promise.all(
      keys.map((key, i) => trpc.pay.mutate({ amount: 10 + i }, { context: { idempotencyKey: key } })),
    );
    expect(again).toEqual(first);
    expect(server.runs('pay')).toHaveLength(2);
  });

  it('gives each mutation its own key and never changes the context object the caller shares between calls', async () => {
    const server = await serve();
    const { trpc } = createIdempotentClient(server);
    const shared = { traceId: 'trace-1' };

    await trpc.pay.mutate({ amount: 5 }, { context: shared });
    await trpc.pay.mutate({ amount: 5 }, { context: shared });

    expect(shared).toEqual({ traceId: 'trace-1' });
    const keys = server.requests.map((r) => r.headers['idempotency-key']);
    expect(keys[0]).toMatch(UUID_V4);
    expect(keys[1]).toMatch(UUID_V4);
    expect(keys[0]).not.toBe(keys[1]);
    expect(server.runs('pay')).toHaveLength(2);
  });

  it('a key holder keeps one key across re-submits of one user action (TanStack retries) and a new one after success', async () => {
    const server = await serve();
    const proxy = await dropProxy(server);
    // maxAttempts 1: the link gives up at once, so the re-submit below is what TanStack's retry or the user does
    const { trpc } = createIdempotentClient(server, { url: proxy.url, link: { maxAttempts: 1 } });
    const key = createIdempotencyKey();
    // what `trpc.pay.mutationOptions({ trpc: { context } })` passes to every call of the mutation
    const context = { idempotencyKey: key };
    const submit = () => trpc.pay.mutate({ amount: 99 }, { context });

    const lost = await rejectionOf(submit());
    key.settle(lost); // the outcome is unknown: the key is kept
    const firstKey = key.peek();
    expect(firstKey).toMatch(UUID_V4);

    const charge = await submit();
    key.settle(); // success: the next action gets a new key
    expect(key.peek()).toBeUndefined();
    expect(server.runs('pay')).toHaveLength(1);
    expect(server.requests.map((r) => r.headers['idempotency-key'])).toEqual([firstKey, firstKey]);

    const next = await submit();
    expect(next.chargeId).not.toBe(charge.chargeId);
    expect(server.runs('pay')).toHaveLength(2);
    expect(server.requests[2]!.headers['idempotency-key']).not.toBe(firstKey);

    // a definitive refusal ends the action too: a corrected re-submit is a new operation
    const before = key.current();
    const mismatch = await rejectionOf(trpc.pay.mutate({ amount: 1 }, { context }));
    expect(getIdempotencyReason(mismatch)).toBe('payload_mismatch');
    key.settle(mismatch);
    expect(key.current()).not.toBe(before);
  });

  it('works without the server error formatter: a 409 is retried after the Retry-After header', async () => {
    const server = await serve({ formatter: false });
    const release = gate();
    server.holdPayments(release.opened);
    const { trpc, retries } = createIdempotentClient(server, { link: { onRetry: () => release.open() } });
    const key = randomUUID();

    const first = trpc.pay.mutate({ amount: 3 }, { context: { idempotencyKey: key } });
    await until(() => server.runs('pay').length === 1);
    const doubleClick = trpc.pay.mutate({ amount: 3 }, { context: { idempotencyKey: key } });
    const [a, b] = await Promise.all([first, doubleClick]);

    expect(b).toEqual(a);
    expect(server.runs('pay')).toHaveLength(1);
    expect(retries.length).toBeGreaterThanOrEqual(1);
    for (const { error, delayMs } of retries) {
      expect(getIdempotencyReason(error)).toBeUndefined();
      expect(getHttpStatus(error)).toBe(409);
      expect(delayMs).toBeGreaterThanOrEqual(1_000);
    }
  });

  it('surfaces a 409 at once when Retry-After is longer than maxDelayMs, and never retries response_too_large', async () => {
    const server = await serve({ retryAfter: 5 });
    const release = gate();
    server.holdPayments(release.opened);
    const { trpc, retries } = createIdempotentClient(server, { link: { maxDelayMs: 1_000 } });
    const key = randomUUID();

    const first = trpc.pay.mutate({ amount: 4 }, { context: { idempotencyKey: key } });
    await until(() => server.runs('pay').length === 1);
    const conflict = await rejectionOf(trpc.pay.mutate({ amount: 4 }, { context: { idempotencyKey: key } }));
    expect(getIdempotencyReason(conflict)).toBe('in_progress');
    release.open();
    await first;

    // the procedure ran and its result was too large to store: the caller has it, a retry is refused and not retried
    const reportKey = randomUUID();
    await trpc.report.mutate({ size: 1_000 }, { context: { idempotencyKey: reportKey } });
    const tooLarge = await rejectionOf(trpc.report.mutate({ size: 1_000 }, { context: { idempotencyKey: reportKey } }));
    expect(getIdempotencyReason(tooLarge)).toBe('response_too_large');
    expect(server.runs('report')).toHaveLength(1);
    expect(retries).toEqual([]);
  });

  it('routes through splitLink to httpLink and httpBatchLink; queries carry no key and are not retried', async () => {
    const server = await serve();
    const { trpc, retries } = createIdempotentClient(server, { transport: 'split' });

    await trpc.pay.mutate({ amount: 1 }, { context: { skipBatch: true } });
    await trpc.pay.mutate({ amount: 2 });
    expect(await trpc.ping.query({ n: 1 })).toEqual({ pong: 1 });
    const failedQuery = await rejectionOf(trpc.broken.query());

    const [single, batched, query, broken] = server.requests;
    expect(single!.url).not.toContain('batch=1');
    expect(Object.keys(keyHeaders(single!))).toEqual(['idempotency-key']);
    expect(batched!.url).toContain('batch=1');
    expect(Object.keys(keyHeaders(batched!))).toEqual(['idempotency-key-0']);
    expect(keyHeaders(query!)).toEqual({});
    expect(keyHeaders(broken!)).toEqual({});
    expect(getHttpStatus(failedQuery)).toBe(500);
    expect(server.requests).toHaveLength(4);
    expect(retries).toEqual([]);
  });
});

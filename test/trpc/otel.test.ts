/**
 * trpc-idempotency/otel: metrics read by an in-memory metric reader, spans by
 * an in-memory span exporter, from a real tRPC server and client on the memory
 * store and on Redis.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import {
  type Context,
  type ContextManager,
  context,
  metrics,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { MeterProvider, type MetricData, MetricReader } from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { initTRPC } from '@trpc/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createIdempotencyEngine,
  IdempotencyConfigError,
  type IdempotencyEvent,
  type IdempotencyMeta,
  type IdempotencyStore,
  idempotencyErrorFormatter,
  memoryStore,
  withIdempotency,
} from '../../src/index.js';
import { CHECK_DURATION_BUCKETS, type OpenTelemetryOptions, openTelemetry } from '../../src/otel.js';
import { redisStore } from '../../src/redis.js';
import { until } from '../helpers/client.js';
import { connectRedis, deadRedis, deleteByPrefix, uniquePrefix } from '../helpers/redis.js';
import { createClient, gate, rejectionOf, startServer } from '../helpers/trpc.js';

const PACKAGE_VERSION = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

/** What an HTTP instrumentation does: the request's span is active while the procedure runs. */
class AsyncLocalStorageContextManager implements ContextManager {
  private readonly storage = new AsyncLocalStorage<Context>();
  active(): Context {
    return this.storage.getStore() ?? ROOT_CONTEXT;
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
    ctx: Context,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    return this.storage.run(ctx, () => fn.apply(thisArg, args));
  }
  bind<T>(ctx: Context, target: T): T {
    if (typeof target !== 'function') return target;
    const manager = this;
    return function (this: unknown, ...args: unknown[]) {
      return manager.with(ctx, () => (target as (...a: unknown[]) => unknown).apply(this, args));
    } as T;
  }
  enable(): this {
    return this;
  }
  disable(): this {
    this.storage.disable();
    return this;
  }
}

beforeAll(() => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager());
});
afterAll(() => {
  context.disable();
});

class TestMetricReader extends MetricReader {
  protected async onShutdown() {}
  protected async onForceFlush() {}
}

/** An SDK of the test's own: a meter provider with an in-memory reader, a tracer provider with an in-memory exporter. */
function sdk() {
  const reader = new TestMetricReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return {
    meterProvider,
    tracerProvider,
    async metrics(): Promise<(MetricData & { scope: { name: string; version?: string } })[]> {
      const { resourceMetrics, errors } = await reader.collect();
      expect(errors).toEqual([]);
      return resourceMetrics.scopeMetrics.flatMap((s) => s.metrics.map((m) => ({ ...m, scope: s.scope })));
    },
    async spans(): Promise<ReadableSpan[]> {
      await tracerProvider.forceFlush();
      return exporter.getFinishedSpans();
    },
  };
}

type Metrics = Awaited<ReturnType<ReturnType<typeof sdk>['metrics']>>;

function metric(all: Metrics, name: string) {
  return all.find((m) => m.descriptor.name === name);
}

/** The data points of `name` whose attributes include `where`. */
function pointsOf(all: Metrics, name: string, where: Record<string, string> = {}) {
  const points = (metric(all, name)?.dataPoints ?? []) as { attributes: Record<string, unknown>; value: unknown }[];
  return points.filter((p) => Object.entries(where).every(([k, v]) => p.attributes[k] === v));
}

/** The total of a counter over the points matching `where`. */
function total(all: Metrics, name: string, where: Record<string, string> = {}): number {
  return pointsOf(all, name, where).reduce((sum, p) => sum + (p.value as number), 0);
}

/** Every name, attribute and message that telemetry holds, as one string to search. */
function everything(all: Metrics, spans: ReadableSpan[]): string {
  return JSON.stringify({
    metrics: all.map((m) => ({ name: m.descriptor.name, points: m.dataPoints.map((p) => p.attributes) })),
    spans: spans.map((s) => ({ name: s.name, attributes: s.attributes, status: s.status, events: s.events })),
  });
}

const hrMs = ([s, ns]: [number, number]) => s * 1_000 + ns / 1e6;

/**
 * A payments router behind withIdempotency, with its events going through
 * openTelemetry. A first middleware opens a request span, as an HTTP
 * instrumentation would, so the check span has a parent.
 */
async function startApp(options: {
  store?: IdempotencyStore;
  telemetry: OpenTelemetryOptions;
  requestTracer?: Tracer;
  storeTimeout?: number;
}) {
  const events: IdempotencyEvent[] = [];
  const userOnEvent = options.telemetry.onEvent;
  const onEvent = openTelemetry({
    ...options.telemetry,
    onEvent: (e) => {
      events.push(e);
      userOnEvent?.(e);
    },
  });
  const t = initTRPC
    .context<{ user: string }>()
    .meta<IdempotencyMeta>()
    .create({ errorFormatter: idempotencyErrorFormatter });
  const requestSpans: { path: string; spanId: string; traceId: string }[] = [];
  const traced = t.procedure.use(({ path, next }) => {
    if (options.requestTracer === undefined) return next();
    return options.requestTracer.startActiveSpan(`request ${path}`, async (span) => {
      requestSpans.push({ path, ...span.spanContext() });
      try {
        return await next();
      } finally {
        span.end();
      }
    });
  });
  const idempotent = withIdempotency(traced, {
    store: options.store ?? memoryStore(),
    storeTimeout: options.storeTimeout ?? 1_000,
    scope: ({ ctx }) => ctx.user,
    onEvent,
  });
  let hold = gate();
  hold.open();
  let running = 0;
  const router = t.router({
    pay: idempotent
      .input(z.object({ amount: z.number(), card: z.string() }))
      .mutation(({ input }) => ({ charged: input.amount, note: 'reçu €' })),
    slow: idempotent.input(z.object({ n: z.number() })).mutation(async ({ input }) => {
      running++;
      await hold.opened;
      return { n: input.n };
    }),
    optional: idempotent
      .meta({ idempotency: { required: false } })
      .input(z.object({ n: z.number() }))
      .mutation(({ input }) => input.n),
    openOnFailure: idempotent
      .meta({ idempotency: { onStoreError: 'fail-open' } })
      .input(z.object({ n: z.number() }))
      .mutation(({ input }) => input.n),
  });
  const server = await startServer(router, ({ req }) => ({ user: String(req.headers['x-user'] ?? 'anonymous') }));
  return {
    server,
    client: createClient<typeof router>(server.url),
    events,
    requestSpans,
    /** Holds `slow` until the returned function is called. */
    holdSlow() {
      hold = gate();
      return hold.open;
    },
    running: () => running,
  };
}

describe('openTelemetry: metrics', () => {
  it('counts every check by result, procedure and store, and times those that reached the store', async () => {
    const otel = sdk();
    const app = await startApp({
      telemetry: { meterProvider: otel.meterProvider, tracerProvider: otel.tracerProvider },
    });
    const { client } = app;
    try {
      const key = randomUUID();
      await client.pay.mutate({ amount: 10, card: '4242' }, { context: { key } }); // acquired
      await client.pay.mutate({ amount: 10, card: '4242' }, { context: { key } }); // replayed
      await rejectionOf(client.pay.mutate({ amount: 99, card: '4242' }, { context: { key } })); // mismatch
      await rejectionOf(client.pay.mutate({ amount: 10, card: '4242' })); // rejected: key_missing
      await rejectionOf(client.pay.mutate({ amount: 10, card: '4242' }, { context: { key: 'k'.repeat(300) } })); // rejected: key_invalid
      await client.optional.mutate({ n: 1 }); // unprotected: no_key

      const release = app.holdSlow();
      const slowKey = randomUUID();
      const first = client.slow.mutate({ n: 1 }, { context: { key: slowKey } });
      await until(() => app.running() === 1);
      const conflict = await rejectionOf(client.slow.mutate({ n: 1 }, { context: { key: slowKey } })); // in_progress
      expect(conflict.data?.httpStatus).toBe(409);
      release();
      await first;

      const all = await otel.metrics();
      const checks = metric(all, 'idempotency.checks');
      expect(checks?.descriptor).toMatchObject({ unit: '{check}', type: 'COUNTER' });
      const count = (where: Record<string, string>) =>
        total(all, 'idempotency.checks', { 'idempotency.store.name': 'memory', ...where });
      expect(count({ 'idempotency.procedure': 'pay', 'idempotency.result': 'acquired' })).toBe(1);
      expect(count({ 'idempotency.procedure': 'pay', 'idempotency.result': 'replayed' })).toBe(1);
      expect(count({ 'idempotency.procedure': 'pay', 'idempotency.result': 'mismatch' })).toBe(1);
      expect(
        count({
          'idempotency.procedure': 'pay',
          'idempotency.result': 'rejected',
          'idempotency.reason': 'key_missing',
        }),
      ).toBe(1);
      expect(
        count({
          'idempotency.procedure': 'pay',
          'idempotency.result': 'rejected',
          'idempotency.reason': 'key_invalid',
        }),
      ).toBe(1);
      expect(
        count({
          'idempotency.procedure': 'optional',
          'idempotency.result': 'unprotected',
          'idempotency.reason': 'no_key',
        }),
      ).toBe(1);
      expect(count({ 'idempotency.procedure': 'slow', 'idempotency.result': 'acquired' })).toBe(1);
      expect(count({ 'idempotency.procedure': 'slow', 'idempotency.result': 'in_progress' })).toBe(1);
      expect(total(all, 'idempotency.checks')).toBe(8); // nothing else: completions are not checks

      // The duration: only the five checks that asked the store, in seconds, on the advised buckets.
      const duration = metric(all, 'idempotency.check.duration');
      expect(duration?.descriptor).toMatchObject({ unit: 's', type: 'HISTOGRAM' });
      const histograms = pointsOf(all, 'idempotency.check.duration') as unknown as {
        attributes: Record<string, unknown>;
        value: { count: number; sum: number; buckets: { boundaries: number[] } };
      }[];
      expect(histograms.map((p) => p.attributes['idempotency.result']).sort()).toEqual([
        'acquired',
        'acquired',
        'in_progress',
        'mismatch',
        'replayed',
      ]);
      expect(histograms.reduce((n, p) => n + p.value.count, 0)).toBe(5);
      for (const p of histograms) {
        expect(p.value.buckets.boundaries).toEqual([...CHECK_DURATION_BUCKETS]);
        expect(p.value.sum).toBeGreaterThan(0);
        expect(p.value.sum).toBeLessThan(1); // seconds, not milliseconds
      }
      const checkEvents = app.events.filter((e) =>
        ['acquired', 'replayed', 'mismatch', 'in_progress'].includes(e.result),
      );
      const eventSeconds = checkEvents.reduce((s, e) => s + e.durationMs / 1_000, 0);
      expect(histograms.reduce((s, p) => s + p.value.sum, 0)).toBeCloseTo(eventSeconds, 9);

      // Replayed bytes: the UTF-8 size of what the replay sent back.
      const replayed = app.events.find((e) => e.result === 'replayed')!;
      expect(replayed.bytes).toBeGreaterThanOrEqual(Buffer.byteLength(JSON.stringify({ charged: 10, note: 'reçu €' })));
      expect(metric(all, 'idempotency.replay.bytes')?.descriptor.unit).toBe('By');
      expect(
        total(all, 'idempotency.replay.bytes', { 'idempotency.procedure': 'pay', 'idempotency.store.name': 'memory' }),
      ).toBe(replayed.bytes);

      // No store trouble here.
      expect(total(all, 'idempotency.store.errors')).toBe(0);
      expect(total(all, 'idempotency.lease.lost')).toBe(0);

      // The instrumentation scope is the package, at its version.
      expect(new Set(all.map((m) => `${m.scope.name}@${m.scope.version}`))).toEqual(
        new Set([`trpc-idempotency@${PACKAGE_VERSION}`]),
      );
    } finally {
      await app.server.close();
    }
  });

  it('counts store errors by operation and a failed check once, fail-closed or fail-open', async () => {
    const otel = sdk();
    const dead = deadRedis();
    const app = await startApp({
      store: redisStore({ client: dead }),
      storeTimeout: 200,
      telemetry: { meterProvider: otel.meterProvider, tracerProvider: otel.tracerProvider },
    });
    try {
      const closed = await rejectionOf(
        app.client.pay.mutate({ amount: 1, card: '4242' }, { context: { key: randomUUID() } }),
      );
      expect(closed.data?.httpStatus).toBe(503);
      expect(await app.client.openOnFailure.mutate({ n: 7 }, { context: { key: randomUUID() } })).toBe(7);

      const all = await otel.metrics();
      const errorEvents = app.events.filter((e) => e.result === 'store_error');
      expect(errorEvents).toHaveLength(2);
      for (const procedure of ['pay', 'openOnFailure']) {
        expect(total(all, 'idempotency.checks', { 'idempotency.procedure': procedure })).toBe(1);
        expect(
          total(all, 'idempotency.checks', {
            'idempotency.procedure': procedure,
            'idempotency.result': 'store_error',
            'idempotency.store.name': 'redis',
          }),
        ).toBe(1);
        const errors = pointsOf(all, 'idempotency.store.errors', { 'idempotency.procedure': procedure });
        expect(errors).toHaveLength(1);
        expect(errors[0]!.value).toBe(1);
        expect(errors[0]!.attributes).toEqual({
          'idempotency.procedure': procedure,
          'idempotency.store.name': 'redis',
          'idempotency.store.operation': 'claim',
          'error.type': errorEvents.find((e) => e.name === procedure)!.error!.name,
        });
      }
      expect(metric(all, 'idempotency.store.errors')?.descriptor.unit).toBe('{error}');

      // The check's span says what failed, with an ERROR status.
      const spans = await otel.spans();
      expect(spans).toHaveLength(2);
      for (const span of spans) {
        expect(span.status.code).toBe(SpanStatusCode.ERROR);
        expect(span.status.message).toBe(errorEvents.find((e) => span.name.endsWith(e.name))!.error!.message);
        expect(span.attributes).toMatchObject({
          'idempotency.result': 'store_error',
          'idempotency.store.operation': 'claim',
          'idempotency.store.name': 'redis',
        });
        expect(span.attributes['error.type']).toEqual(expect.any(String));
      }
    } finally {
      await app.server.close();
      dead.disconnect();
    }
  });

  it('counts renewals and lost leases on Redis', async () => {
    const redis = connectRedis();
    const prefix = uniquePrefix('otel');
    const otel = sdk();
    const events: IdempotencyEvent[] = [];
    const renewedThrice = gate();
    const store = redisStore({ client: redis, prefix });
    const engine = createIdempotencyEngine({
      store,
      // renewed every 100 ms, each renewal given 100 ms (storeTimeout): a loaded machine's Redis can take 50
      lockTtl: 300,
      onEvent: openTelemetry({
        meterProvider: otel.meterProvider,
        tracerProvider: otel.tracerProvider,
        onEvent: (e) => {
          events.push(e);
          if (events.filter((r) => r.result === 'renewed' && r.name === 'report').length === 3) renewedThrice.open();
        },
      }),
    });
    try {
      // Runs until its claim was renewed three times (every 100 ms), then finishes.
      await engine.run({ key: randomUUID(), name: 'report', payload: {} }, async () => {
        await renewedThrice.opened;
        return 'done';
      });
      // The record disappears while the operation runs: the next renewal finds the claim gone.
      const key = randomUUID();
      await engine.run({ key, name: 'transfer', payload: {} }, async ({ signal }) => {
        await redis.del(store.keyOf(`:transfer:${key}`));
        await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve()));
        return 'aborted';
      });

      const all = await otel.metrics();
      const renewals = events.filter((e) => e.result === 'renewed' && e.name === 'report').length;
      expect(renewals).toBeGreaterThanOrEqual(3);
      expect(metric(all, 'idempotency.lease.renewed')?.descriptor.unit).toBe('{renewal}');
      expect(
        total(all, 'idempotency.lease.renewed', {
          'idempotency.procedure': 'report',
          'idempotency.store.name': 'redis',
        }),
      ).toBe(renewals);
      expect(pointsOf(all, 'idempotency.lease.lost')).toEqual([
        expect.objectContaining({
          attributes: {
            'idempotency.procedure': 'transfer',
            'idempotency.store.name': 'redis',
            'idempotency.reason': 'fenced',
          },
          value: 1,
        }),
      ]);
      expect(total(all, 'idempotency.checks', { 'idempotency.result': 'acquired' })).toBe(2);
    } finally {
      await deleteByPrefix(redis, prefix);
      redis.disconnect();
    }
  });

  it('counts a lost claim once (the lease saw it, then the completion was refused), and evictions of a bounded store', async () => {
    const otel = sdk();
    const events: IdempotencyEvent[] = [];
    const onEvent = openTelemetry({
      meterProvider: otel.meterProvider,
      tracerProvider: otel.tracerProvider,
      onEvent: (e) => events.push(e),
    });
    let time = 1_000_000;
    const store = memoryStore({ maxEntries: 2, now: () => time });
    const holder = createIdempotencyEngine({ store, lockTtl: 300, onEvent });
    const other = createIdempotencyEngine({ store, lockTtl: 300 });
    const stalled = gate();
    const input = { key: randomUUID(), name: 'transfer', payload: {} };
    const first = holder.run(input, async () => {
      await stalled.opened; // a frozen VM
      return 'from the holder';
    });
    await until(() => events.some((e) => e.result === 'acquired'));
    time += 400; // meanwhile its claim expired in the store, and another request took over and finished
    expect(await other.run(input, async () => 'from the other')).toEqual({ value: 'from the other', replayed: false });
    await until(() => events.some((e) => e.result === 'lease_lost')); // the holder's next renewal finds the claim gone
    stalled.open();
    expect(await first).toEqual({ value: 'from the holder', replayed: false }); // its completion is refused: fenced
    expect(events.filter((e) => e.result === 'lease_lost').map((e) => e.reason)).toEqual(['fenced']);

    // two more keys in a store of two: the oldest finished record goes, and the event says which operation lost it
    await holder.run({ key: randomUUID(), name: 'refund', payload: {} }, async () => 1);
    await holder.run({ key: randomUUID(), name: 'refund', payload: {} }, async () => 2);
    const evicted = events.filter((e) => e.result === 'evicted');
    expect(evicted).toEqual([
      expect.objectContaining({ name: 'transfer', store: 'memory', keyHash: events[0]!.keyHash }),
    ]);

    const all = await otel.metrics();
    expect(total(all, 'idempotency.lease.lost', { 'idempotency.reason': 'fenced' })).toBe(1);
    expect(metric(all, 'idempotency.store.evictions')?.descriptor.unit).toBe('{record}');
    expect(pointsOf(all, 'idempotency.store.evictions')).toEqual([
      expect.objectContaining({
        attributes: { 'idempotency.procedure': 'transfer', 'idempotency.store.name': 'memory' },
        value: 1,
      }),
    ]);
    store.close();
  });

  it('records nothing without an SDK, then uses a global SDK registered after the handler was made', async () => {
    const handler = openTelemetry();
    const engine = createIdempotencyEngine({ store: memoryStore(), onEvent: handler });
    // No SDK: the API's no-op meter and tracer; the request is unaffected.
    await expect(engine.run({ key: randomUUID(), name: 'early', payload: {} }, async () => 'ok')).resolves.toEqual({
      value: 'ok',
      replayed: false,
    });

    const otel = sdk();
    expect(metrics.setGlobalMeterProvider(otel.meterProvider)).toBe(true);
    expect(trace.setGlobalTracerProvider(otel.tracerProvider)).toBe(true);
    try {
      await engine.run({ key: randomUUID(), name: 'late', payload: {} }, async () => 'ok');
      const all = await otel.metrics();
      expect(
        pointsOf(all, 'idempotency.checks').map((p) => [
          p.attributes['idempotency.procedure'],
          p.attributes['idempotency.result'],
          p.value,
        ]),
      ).toEqual([['late', 'acquired', 1]]);
      expect((await otel.spans()).map((s) => s.name)).toEqual(['idempotency.check late']);
    } finally {
      metrics.disable();
      trace.disable();
    }
  });

  it('records only what is asked: metrics: false, spans: false', async () => {
    const withoutMetrics = sdk();
    const withoutSpans = sdk();
    for (const [otel, options] of [
      [withoutMetrics, { metrics: false }],
      [withoutSpans, { spans: false }],
    ] as const) {
      const engine = createIdempotencyEngine({
        store: memoryStore(),
        onEvent: openTelemetry({ meterProvider: otel.meterProvider, tracerProvider: otel.tracerProvider, ...options }),
      });
      await engine.run({ key: randomUUID(), name: 'op', payload: {} }, async () => 'ok');
    }
    expect(total(await withoutMetrics.metrics(), 'idempotency.checks')).toBe(0);
    expect(await withoutMetrics.spans()).toHaveLength(1);
    expect(total(await withoutSpans.metrics(), 'idempotency.checks')).toBe(1);
    expect(await withoutSpans.spans()).toHaveLength(0);
  });
});

describe('openTelemetry: spans', () => {
  it('opens one span per check under the request span, with its real start time and its attributes', async () => {
    const otel = sdk();
    const requestTracer = otel.tracerProvider.getTracer('test-http');
    const app = await startApp({
      telemetry: { meterProvider: otel.meterProvider, tracerProvider: otel.tracerProvider },
      requestTracer,
    });
    try {
      const key = randomUUID();
      await app.client.pay.mutate({ amount: 5, card: '4242' }, { context: { key } });
      await app.client.pay.mutate({ amount: 5, card: '4242' }, { context: { key } });
      await rejectionOf(app.client.pay.mutate({ amount: 5, card: '4242' }));

      const spans = await otel.spans();
      const checks = spans.filter((s) => s.instrumentationScope.name === 'trpc-idempotency');
      expect(checks.map((s) => s.name)).toEqual([
        'idempotency.check pay',
        'idempotency.check pay',
        'idempotency.check pay',
      ]);
      expect(checks.map((s) => s.attributes['idempotency.result'])).toEqual(['acquired', 'replayed', 'rejected']);
      const checkEvents = app.events.filter((e) => ['acquired', 'replayed', 'rejected'].includes(e.result));
      expect(app.requestSpans).toHaveLength(3);

      checks.forEach((span, i) => {
        const event = checkEvents[i]!;
        const request = app.requestSpans[i]!;
        expect(span.kind).toBe(SpanKind.INTERNAL);
        expect(span.instrumentationScope.version).toBe(PACKAGE_VERSION);
        expect(span.ended).toBe(true);
        // A child of the request's span, in its trace.
        expect(span.parentSpanContext?.spanId).toBe(request.spanId);
        expect(span.spanContext().traceId).toBe(request.traceId);
        // It lasts what the check lasted, and lies within the request's span.
        expect(hrMs(span.duration)).toBeCloseTo(event.durationMs, 2);
        const parent = spans.find((s) => s.spanContext().spanId === request.spanId)!;
        expect(hrMs(span.startTime)).toBeGreaterThanOrEqual(hrMs(parent.startTime) - 2);
        expect(hrMs(span.endTime)).toBeLessThanOrEqual(hrMs(parent.endTime) + 2);
        expect(span.status.code).toBe(SpanStatusCode.UNSET);
      });

      expect(checks[0]!.attributes).toEqual({
        'idempotency.result': 'acquired',
        'idempotency.procedure': 'pay',
        'idempotency.store.name': 'memory',
        'idempotency.key.hash': checkEvents[0]!.keyHash,
      });
      expect(checks[0]!.attributes['idempotency.key.hash']).toMatch(/^[0-9a-f]{16}$/);
      expect(checks[1]!.attributes).toEqual({
        'idempotency.result': 'replayed',
        'idempotency.procedure': 'pay',
        'idempotency.store.name': 'memory',
        'idempotency.key.hash': checkEvents[0]!.keyHash,
        'idempotency.record.state': 'completed',
        'idempotency.replay.body.size': checkEvents[1]!.bytes,
      });
      expect(checks[2]!.attributes).toEqual({
        'idempotency.result': 'rejected',
        'idempotency.procedure': 'pay',
        'idempotency.store.name': 'memory',
        'idempotency.reason': 'key_missing',
      });
    } finally {
      await app.server.close();
    }
  });

  it('never lets the raw key, the scope or the payload into a metric or a span', async () => {
    const otel = sdk();
    const app = await startApp({
      telemetry: { meterProvider: otel.meterProvider, tracerProvider: otel.tracerProvider },
    });
    const key = `secret-key-${randomUUID()}`;
    const user = `user-${randomUUID()}`;
    const card = `card-${randomUUID()}`;
    const headers = { 'x-user': user };
    try {
      await app.client.pay.mutate({ amount: 31337, card }, { context: { key, headers } });
      await app.client.pay.mutate({ amount: 31337, card }, { context: { key, headers } });
      await rejectionOf(app.client.pay.mutate({ amount: 4, card }, { context: { key, headers } }));
      await rejectionOf(
        app.client.pay.mutate({ amount: 4, card }, { context: { key: `${key}${'x'.repeat(300)}`, headers } }),
      );

      const all = await otel.metrics();
      const spans = await otel.spans();
      expect(spans).toHaveLength(4);
      const text = everything(all, spans);
      for (const secret of [key, user, card, '31337']) expect(text).not.toContain(secret);
      // What identifies the key is its hash, on spans only: metrics stay low-cardinality.
      const hashes = new Set(spans.map((s) => s.attributes['idempotency.key.hash']).filter((h) => h !== undefined));
      expect(hashes.size).toBe(1);
      expect([...hashes][0]).toMatch(/^[0-9a-f]{16}$/);
      expect(text.match(/idempotency\.key\.hash/g)).toHaveLength(3);
      for (const m of all)
        for (const p of m.dataPoints) expect(Object.keys(p.attributes)).not.toContain('idempotency.key.hash');
    } finally {
      await app.server.close();
    }
  });
});

describe('openTelemetry: options', () => {
  it('passes every event on to onEvent, even when recording fails, and survives a throwing onEvent', async () => {
    const seen: IdempotencyEvent[] = [];
    const broken = {
      getMeter: () => {
        throw new Error('broken SDK');
      },
    } as unknown as MeterProvider;
    const engine = createIdempotencyEngine({
      store: memoryStore(),
      onEvent: openTelemetry({ meterProvider: broken, onEvent: (e) => seen.push(e) }),
    });
    await expect(engine.run({ key: 'k', name: 'op', payload: {} }, async () => 'ok')).resolves.toEqual({
      value: 'ok',
      replayed: false,
    });
    expect(seen.map((e) => e.result)).toEqual(['acquired', 'completed']);

    const otel = sdk();
    const throwing = createIdempotencyEngine({
      store: memoryStore(),
      onEvent: openTelemetry({
        meterProvider: otel.meterProvider,
        onEvent: () => {
          throw new Error('logger down');
        },
      }),
    });
    await expect(throwing.run({ key: 'k', name: 'op', payload: {} }, async () => 'ok')).resolves.toEqual({
      value: 'ok',
      replayed: false,
    });
    expect(total(await otel.metrics(), 'idempotency.checks', { 'idempotency.result': 'acquired' })).toBe(1);
  });

  it('refuses bad options at creation, saying what to pass', () => {
    expect(() => openTelemetry({ meterProvider: {} as MeterProvider })).toThrow(IdempotencyConfigError);
    expect(() => openTelemetry({ meterProvider: {} as MeterProvider })).toThrow(
      /meterProvider must be a MeterProvider.*leave it out to use the global one/,
    );
    expect(() => openTelemetry({ tracerProvider: { getMeter() {} } as never })).toThrow(
      /tracerProvider must be a TracerProvider/,
    );
    expect(() => openTelemetry({ onEvent: 'log' as never })).toThrow(
      /openTelemetry: onEvent must be a function that takes an event, got the string "log"\./,
    );
    expect(() => openTelemetry({ spans: 'yes' as never })).toThrow(
      /openTelemetry: spans must be true or false, got the string "yes"\./,
    );
    expect(() => openTelemetry({ metrics: 1 as never })).toThrow(
      /openTelemetry: metrics must be true or false, got the number 1\./,
    );
    expect(openTelemetry()).toBeTypeOf('function');
    expect(openTelemetry().name).toBe('recordIdempotencyTelemetry');
  });
});

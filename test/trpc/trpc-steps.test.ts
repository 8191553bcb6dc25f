/**
 * Recovery points through tRPC: `steps(opts)` in a mutation of a real tRPC
 * HTTP server, called by a real `@trpc/client`, on the memory store and on
 * Redis; and the `idempotency.steps` metric of the OpenTelemetry handler.
 */
import { randomUUID } from 'node:crypto';
import { MeterProvider, type MetricData, MetricReader } from '@opentelemetry/sdk-metrics';
import { initTRPC, TRPCError } from '@trpc/server';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { deriveStepKey, recordId } from '../../src/core.js';
import {
  type IdempotencyEvent,
  type IdempotencyMeta,
  type IdempotencyStore,
  idempotencyErrorFormatter,
  steps,
  type WithIdempotencyOptions,
  withIdempotency,
} from '../../src/index.js';
import { openTelemetry } from '../../src/otel.js';
import { redisStore } from '../../src/redis.js';
import { deadRedis } from '../helpers/redis.js';
import { liveStores } from '../helpers/stores.js';
import { createClient, rejectionOf, type Seen, startServer, type TestServer } from '../helpers/trpc.js';

const { stores } = liveStores('trpc-steps', ['memory', 'redis']);

const servers: TestServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

class TestMetricReader extends MetricReader {
  protected async onShutdown() {}
  protected async onForceFlush() {}
}

/**
 * A payments router whose `pay` runs two steps, `reserve` then `charge`.
 * `failAfterReserve` makes the next calls throw a 500 between them; `names`
 * are the step names `pay` uses, so a test can rename one between two calls.
 */
async function startApp(
  store: IdempotencyStore,
  onEvent?: (event: IdempotencyEvent) => void,
  options: Pick<WithIdempotencyOptions<object>, 'onStoreError' | 'storeTimeout'> = {},
) {
  const events: IdempotencyEvent[] = [];
  /** Real runs of each step's work. */
  const runs: Record<string, number> = {};
  /** The `key` each step's work was given, by step name. */
  const keysSeen: Record<string, string> = {};
  const plan = { failAfterReserve: 0, names: ['reserve', 'charge'] };

  const t = initTRPC
    .context<{ user: string }>()
    .meta<IdempotencyMeta>()
    .create({ errorFormatter: idempotencyErrorFormatter });
  const idempotent = withIdempotency(t.procedure, {
    ...options,
    store,
    scope: ({ ctx }) => ctx.user,
    onEvent: (event) => {
      events.push(event);
      onEvent?.(event);
    },
  });
  const work =
    <T>(name: string, value: T) =>
    ({ key }: { key: string }) => {
      runs[name] = (runs[name] ?? 0) + 1;
      keysSeen[name] = key;
      return value;
    };
  const payment = z.object({ amount: z.number() });

  const router = t.router({
    pay: idempotent.input(payment).mutation(async (opts) => {
      const { step, stepKey } = steps(opts);
      const [first, second] = plan.names as [string, string];
      const reservation = await step(first, work(first, { id: `res_${opts.input.amount}` }));
      if (plan.failAfterReserve > 0) {
        plan.failAfterReserve--;
        throw new TRPCError({ code: 'INTERNAL_SERVER_ERROR', message: 'ledger unavailable' });
      }
      const charge = await step(second, work(second, { id: randomUUID(), amount: opts.input.amount }));
      return { reservation: reservation.id, charge, chargeKey: stepKey(second) };
    }),
    // Not a protected mutation: steps(opts) must refuse it.
    balance: idempotent.input(payment).query((opts) => {
      steps(opts);
      return 0;
    }),
    // Without a key it runs unprotected: no call to record steps under.
    optional: idempotent
      .meta({ idempotency: { required: false } })
      .input(payment)
      .mutation(async (opts) => steps(opts).step('charge', () => opts.input.amount)),
    // The resolver rebuilds its options from destructured fields: not the options the adapter made.
    rebuilt: idempotent.input(payment).mutation(async (opts) => {
      const { input, ctx } = opts;
      const { step } = steps({ input, ctx });
      return step('charge', () => input.amount);
    }),
  });
  const server = await startServer(router, ({ req }) => ({ user: String(req.headers['x-user'] ?? 'alice') }));
  servers.push(server);
  const seen: Seen = [];
  return { client: createClient<typeof router>(server.url, { seen }), seen, events, runs, keysSeen, plan };
}

/** `step:reason` of each step event, in order. */
const stepEvents = (events: IdempotencyEvent[]) =>
  events.filter((e) => e.result === 'step').map((e) => `${e.step}:${e.reason}`);

describe.each(stores)('steps(opts) through tRPC, $name store', ({ name: storeName, make: makeStore }) => {
  it('a retry after a 500 between two steps resumes after the first; a later call replays the outcome', async () => {
    const app = await startApp(makeStore());
    const key = randomUUID();
    app.plan.failAfterReserve = 1;

    const failed = await rejectionOf(app.client.pay.mutate({ amount: 10 }, { context: { key } }));
    expect(failed.data?.httpStatus).toBe(500);
    expect(failed.message).toBe('ledger unavailable');
    expect(stepEvents(app.events)).toEqual(['reserve:ran']);
    // The 500 gave the key back, with the step it recorded.
    expect(app.events.filter((e) => e.result === 'released').map((e) => e.reason)).toEqual(['error']);

    app.events.length = 0;
    const first = await app.client.pay.mutate({ amount: 10 }, { context: { key } });
    expect(app.runs).toEqual({ reserve: 1, charge: 1 });
    expect(first.reservation).toBe('res_10');
    expect(stepEvents(app.events)).toEqual(['reserve:resumed', 'charge:ran']);
    expect(app.seen.at(-1)?.get('idempotent-replayed')).toBeNull();
    for (const e of app.events) expect(e.store).toBe(storeName);

    const replayed = await app.client.pay.mutate({ amount: 10 }, { context: { key } });
    expect(replayed).toEqual(first);
    expect(app.seen.at(-1)?.get('idempotent-replayed')).toBe('true');
    expect(app.runs).toEqual({ reserve: 1, charge: 1 });
  });

  it('refuses another payload on a key whose steps are recorded (422); the first payload then resumes', async () => {
    const app = await startApp(makeStore());
    const key = randomUUID();
    app.plan.failAfterReserve = 1;
    await rejectionOf(app.client.pay.mutate({ amount: 10 }, { context: { key } }));
    const other = await rejectionOf(app.client.pay.mutate({ amount: 99 }, { context: { key } }));
    expect(other.data?.httpStatus).toBe(422);
    expect(other.data?.idempotency).toEqual({ reason: 'payload_mismatch' });
    expect(other.message).toContain('the first payload, retried with this key, resumes after its completed steps');
    const resumed = await app.client.pay.mutate({ amount: 10 }, { context: { key } });
    expect(resumed.reservation).toBe('res_10');
    expect(app.runs).toEqual({ reserve: 1, charge: 1 });
  });

  it('steps(opts) in a query, without a key, or with options rebuilt from destructured fields, is a 500 step_misuse that says why', async () => {
    const app = await startApp(makeStore());
    const inQuery = await rejectionOf(app.client.balance.query({ amount: 1 }));
    const rebuilt = await rejectionOf(app.client.rebuilt.mutate({ amount: 1 }, { context: { key: randomUUID() } }));
    const keyless = await rejectionOf(app.client.optional.mutate({ amount: 1 }));
    // With a key, the same procedure records its step.
    expect(await app.client.optional.mutate({ amount: 1 }, { context: { key: randomUUID() } })).toBe(1);
    expect(stepEvents(app.events)).toEqual(['charge:ran']);
    for (const error of [inQuery, rebuilt, keyless]) {
      expect(error.data?.httpStatus).toBe(500);
      expect(error.data?.idempotency).toEqual({ reason: 'step_misuse' });
      expect(error.message).toBe(
        "steps(opts) needs the options a protected mutation's resolver receives, as in `.mutation(async (opts) => { const { step } = steps(opts); ... })`. " +
          'These options are not: the procedure is not built with withIdempotency, is a query, runs without a key (required: false), or the options were rebuilt from their fields (pass the object the resolver received).',
      );
    }
  });

  it('a retry that renames a recorded step is a 500 naming both sequences; the original code then finishes', async () => {
    const app = await startApp(makeStore());
    const key = randomUUID();
    app.plan.failAfterReserve = 1;
    await rejectionOf(app.client.pay.mutate({ amount: 10 }, { context: { key } }));

    app.plan.names = ['hold', 'charge'];
    const renamed = await rejectionOf(app.client.pay.mutate({ amount: 10 }, { context: { key } }));
    expect(renamed.data?.httpStatus).toBe(500);
    expect(renamed.data?.idempotency).toEqual({ reason: 'step_mismatch' });
    expect(renamed.message).toContain(
      'This run reached the steps ["hold"], but an earlier run of this key recorded ["reserve"].',
    );
    expect(app.runs).toEqual({ reserve: 1 });

    // The key was released with its recorded step: the code that reaches it finishes the operation.
    app.plan.names = ['reserve', 'charge'];
    const done = await app.client.pay.mutate({ amount: 10 }, { context: { key } });
    expect(done.reservation).toBe('res_10');
    expect(app.runs).toEqual({ reserve: 1, charge: 1 });
  });

  it("the key a step's work gets is stepKey(name), derived from the user's scope", async () => {
    const app = await startApp(makeStore());
    const key = randomUUID();
    const alice = await app.client.pay.mutate({ amount: 10 }, { context: { key } });
    const aliceKey = app.keysSeen.charge;
    expect(aliceKey).toBe(alice.chargeKey);
    expect(aliceKey).toBe(deriveStepKey(recordId('alice', 'pay', key), 'charge'));
    expect(app.keysSeen.reserve).not.toBe(aliceKey);

    // The same client key sent by another user is another operation, with other downstream keys.
    const bob = await app.client.pay.mutate({ amount: 10 }, { context: { key, headers: { 'x-user': 'bob' } } });
    expect(app.keysSeen.charge).toBe(bob.chargeKey);
    expect(bob.chargeKey).toBe(deriveStepKey(recordId('bob', 'pay', key), 'charge'));
    expect(bob.chargeKey).not.toBe(aliceKey);
    expect(app.runs).toEqual({ reserve: 2, charge: 2 });
  });

  it('openTelemetry counts the steps that ran and those resumed in idempotency.steps, by step and reason', async () => {
    const reader = new TestMetricReader();
    const app = await startApp(makeStore(), openTelemetry({ meterProvider: new MeterProvider({ readers: [reader] }) }));
    const key = randomUUID();
    app.plan.failAfterReserve = 1;
    await rejectionOf(app.client.pay.mutate({ amount: 10 }, { context: { key } }));
    await app.client.pay.mutate({ amount: 10 }, { context: { key } });
    await app.client.pay.mutate({ amount: 10 }, { context: { key } }); // a replay: no step runs

    const { resourceMetrics, errors } = await reader.collect();
    expect(errors).toEqual([]);
    const metrics: MetricData[] = resourceMetrics.scopeMetrics.flatMap((s) => s.metrics);
    const counter = metrics.find((m) => m.descriptor.name === 'idempotency.steps');
    expect(counter?.descriptor).toMatchObject({ unit: '{step}', type: 'COUNTER' });
    const points = (counter?.dataPoints ?? []).map((p) => ({ attributes: p.attributes, value: p.value }));
    const point = (step: string, reason: string) => ({
      attributes: {
        'idempotency.procedure': 'pay',
        'idempotency.store.name': storeName,
        'idempotency.step': step,
        'idempotency.reason': reason,
      },
      value: 1,
    });
    expect(points).toHaveLength(3);
    expect(points).toEqual(
      expect.arrayContaining([point('reserve', 'ran'), point('reserve', 'resumed'), point('charge', 'ran')]),
    );
  });
});

describe('steps(opts) under fail-open', () => {
  it('runs every step on each call, unrecorded, with the same derived keys', async () => {
    const dead = deadRedis();
    try {
      const app = await startApp(redisStore({ client: dead }), undefined, {
        onStoreError: 'fail-open',
        storeTimeout: 200,
      });
      const key = randomUUID();
      const first = await app.client.pay.mutate({ amount: 10 }, { context: { key } });
      const firstKey = app.keysSeen.charge;
      expect(firstKey).toBe(first.chargeKey);
      expect(firstKey).toBe(deriveStepKey(recordId('alice', 'pay', key), 'charge'));
      const second = await app.client.pay.mutate({ amount: 10 }, { context: { key } });
      // Nothing was recorded: both calls ran both steps, and sent the same keys downstream.
      expect(app.runs).toEqual({ reserve: 2, charge: 2 });
      expect(second.charge.id).not.toBe(first.charge.id);
      expect(app.keysSeen.charge).toBe(firstKey);
      expect(stepEvents(app.events)).toEqual([
        'reserve:unprotected',
        'charge:unprotected',
        'reserve:unprotected',
        'charge:unprotected',
      ]);
    } finally {
      dead.disconnect();
    }
  });
});

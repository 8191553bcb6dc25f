/**
 * Edges of recovery points found by writing their docs: the client keeps its
 * key after a step that could not be recorded, transactional mode deletes the
 * steps with a stored 4xx, and a claim lost before a step was recorded answers
 * 409 with Retry-After and is reported once.
 */
import { randomUUID } from 'node:crypto';
import { initTRPC, TRPCError } from '@trpc/server';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createIdempotencyKey, getIdempotencyReason } from '../../src/client.js';
import { createIdempotencyEngine, type IdempotencyEvent } from '../../src/core.js';
import { drizzleStore } from '../../src/drizzle.js';
import {
  type IdempotencyMeta,
  idempotencyErrorFormatter,
  memoryStore,
  steps,
  withIdempotency,
} from '../../src/index.js';
import { trpcCodec } from '../../src/trpc/transformer-codec.js';
import { isolatedSchema, type PgSchema } from '../helpers/postgres.js';
import { createClient, rejectionOf, type Seen, startServer, type TestServer } from '../helpers/trpc.js';

const servers: TestServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

describe('the client after a 500 step_unrecorded', () => {
  it('keeps the key: the step already ran downstream, and only the same key sends it the same stepKey again', async () => {
    const t = initTRPC.meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });
    const idempotent = withIdempotency(t.procedure, { scope: 'global', store: memoryStore() });
    const router = t.router({
      pay: idempotent.meta({ idempotency: { maxResponseBytes: 50 } }).mutation(async (opts) => {
        // The charge went through downstream; its answer is too large to record.
        await steps(opts).step('charge', () => 'x'.repeat(100));
        return 'paid';
      }),
    });
    const server = await startServer(router);
    servers.push(server);
    const client = createClient<typeof router>(server.url);

    const holder = createIdempotencyKey();
    const key = holder.current();
    const error = await rejectionOf(client.pay.mutate(undefined, { context: { key } }));
    expect(getIdempotencyReason(error)).toBe('step_unrecorded');
    expect(error.message).toContain('A retry with the same key runs this step again');
    // TanStack's onSettled: a kept key makes the user's next attempt a retry of this operation.
    holder.settle(error);
    expect(holder.peek()).toBe(key);
  });
});

describe('transactional mode: a 4xx stored after a step', () => {
  let pg: PgSchema;
  beforeAll(async () => {
    pg = await isolatedSchema('steps_open');
  });
  afterAll(async () => {
    await pg?.drop();
  });

  it('deletes the recorded steps with the stored outcome, as outside transactional mode', async () => {
    const store = drizzleStore({ db: pg.db });
    const left: Record<string, number> = {};
    for (const transaction of [false, true]) {
      const engine = createIdempotencyEngine({ store, transaction });
      const key = randomUUID();
      const result = await engine.execute({
        key,
        name: 'pay',
        payload: {},
        codec: trpcCodec(undefined),
        run: async ({ step }) => {
          await step('charge', () => 'ch_1');
          throw new TRPCError({ code: 'BAD_REQUEST', message: 'Card declined' });
        },
      });
      expect(result).toMatchObject({ ok: false, replayed: false });
      const rows = await pg.pool.query('select count(*)::int as n from idempotency_steps where id like $1', [
        `%${key}`,
      ]);
      left[transaction ? 'transaction' : 'no transaction'] = rows.rows[0].n;
    }
    expect(left).toEqual({ 'no transaction': 0, transaction: 0 });
  });
});

/** A memory store whose clock the test moves: a claim expires in the store while its holder's lease has not noticed. */
function storeWithClock() {
  const clock = { now: Date.now() };
  return { clock, store: memoryStore({ now: () => clock.now }) };
}

describe('a claim lost before a step could be recorded', () => {
  it('answers 409 in_progress with Retry-After through tRPC, as errors.md says of in_progress', async () => {
    const { clock, store } = storeWithClock();
    const t = initTRPC.meta<IdempotencyMeta>().create({ errorFormatter: idempotencyErrorFormatter });
    const idempotent = withIdempotency(t.procedure, { scope: 'global', store, lockTtl: 30_000 });
    const router = t.router({
      pay: idempotent.mutation(async (opts) => {
        await steps(opts).step('charge', () => {
          clock.now += 60_000; // the claim expires in the store while the charge runs
          return 'ch_1';
        });
        return 'paid';
      }),
    });
    const server = await startServer(router);
    servers.push(server);
    const seen: Seen = [];
    const client = createClient<typeof router>(server.url, { seen });

    const error = await rejectionOf(client.pay.mutate(undefined, { context: { key: randomUUID() } }));
    expect(getIdempotencyReason(error)).toBe('in_progress');
    expect(error.message).toContain('the claim on this key was lost before step "charge" could be recorded');
    expect({ status: error.data?.httpStatus, retryAfter: seen.at(-1)?.get('retry-after') }).toEqual({
      status: 409,
      retryAfter: '1',
    });
  });

  it('reports the lost claim once (one lease_lost event), as every other way a claim is lost', async () => {
    const { clock, store } = storeWithClock();
    const events: IdempotencyEvent[] = [];
    const engine = createIdempotencyEngine({ store, lockTtl: 30_000, onEvent: (e) => events.push(e) });
    const run = engine.run({ key: randomUUID(), name: 'pay', payload: {} }, async ({ step }) => {
      await step('charge', () => {
        clock.now += 60_000;
        return 'ch_1';
      });
    });
    await expect(run).rejects.toMatchObject({ reason: 'in_progress' });
    expect(events.filter((e) => e.result === 'lease_lost').map((e) => e.reason)).toEqual(['fenced']);
  });
});

/**
 * payments.refund of the example app never refunds more than the charge,
 * even when refunds with different keys (distinct operations) arrive at once:
 * the app as a separate process, its ledger on the real PostgreSQL server,
 * for each idempotency store it supports.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isolatedSchema, type PgSchema } from '../helpers/postgres.js';
import { connectRedis, deleteByPrefix, uniquePrefix } from '../helpers/redis.js';
import { type Instance, pay, startInstance } from './helpers.js';

interface RefundAnswer {
  status: number;
  replayed: boolean;
  refundId?: number;
  message?: string;
}

/** payments.refund over plain HTTP. */
async function refund(
  instance: Instance,
  opts: { user: string; key: string; chargeId: number; amount: number },
): Promise<RefundAnswer> {
  const response = await fetch(`${instance.url}/trpc/payments.refund`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-user': opts.user, 'idempotency-key': opts.key },
    body: JSON.stringify({ chargeId: opts.chargeId, amount: opts.amount }),
  });
  const body = (await response.json()) as { result?: { data: { id: number } }; error?: { message: string } };
  return {
    status: response.status,
    replayed: response.headers.get('idempotent-replayed') === 'true',
    refundId: body.result?.data.id,
    message: body.error?.message,
  };
}

const redis = connectRedis();
afterAll(() => redis.disconnect());

describe.each(['memory', 'redis', 'postgres'] as const)(
  'payments.refund with the %s store, the ledger on PostgreSQL',
  (store) => {
    let pgs: PgSchema;
    let app: Instance;
    const prefix = uniquePrefix(`e2e-refund-${store}`);

    const refunded = async (chargeId: number) =>
      (
        await pgs.pool.query<{ n: number; sum: number }>(
          'select count(*)::int as n, coalesce(sum(amount), 0)::int as sum from refunds where charge_id = $1',
          [chargeId],
        )
      ).rows[0]!;
    const newCharge = async (user: string, amount: number) => {
      const charge = await pay(app, { user, key: randomUUID(), amount });
      expect(charge.status).toBe(200);
      return charge.chargeId!;
    };

    beforeAll(async () => {
      pgs = await isolatedSchema(`e2e_refund_${store}`, 2, false); // the app migrates it
      app = await startInstance(`refund-${store}`, {
        IDEMPOTENCY_STORE: store,
        DATABASE_URL: pgs.url,
        REDIS_PREFIX: prefix,
      });
    }, 120_000);
    afterAll(async () => {
      await app?.kill('SIGKILL');
      await deleteByPrefix(redis, prefix);
      await pgs?.drop();
    });

    it('ten concurrent refunds of 30 with different keys on a charge of 100: three go through, seven get 400', async () => {
      const user = randomUUID();
      const chargeId = await newCharge(user, 100);
      const answers = await Promise.all(
        Array.from({ length: 10 }, () => refund(app, { user, key: randomUUID(), chargeId, amount: 30 })),
      );
      const ledger = await refunded(chargeId);
      const statuses = answers.map((a) => a.status);
      expect({ statuses: statuses.toSorted(), ledger }).toEqual({
        statuses: [200, 200, 200, 400, 400, 400, 400, 400, 400, 400],
        ledger: { n: 3, sum: 90 },
      });
      for (const refused of answers.filter((a) => a.status === 400)) {
        expect(refused.message).toBe('Cannot refund 30: only 10 of the 100 charged is left to refund.');
      }
      expect(new Set(answers.filter((a) => a.status === 200).map((a) => a.refundId)).size).toBe(3);
    });

    it('the same key sent twice at once, then again: refunded once, the duplicates replay it', async () => {
      const user = randomUUID();
      const chargeId = await newCharge(user, 100);
      const key = randomUUID();
      // inFlight: 'wait': the concurrent duplicate waits for the first and replays its answer
      const both = await Promise.all([
        refund(app, { user, key, chargeId, amount: 60 }),
        refund(app, { user, key, chargeId, amount: 60 }),
      ]);
      const again = await refund(app, { user, key, chargeId, amount: 60 });
      const answers = [...both, again];
      expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
      expect(new Set(answers.map((a) => a.refundId)).size).toBe(1);
      expect(answers.filter((a) => a.replayed)).toHaveLength(2);
      expect(again.replayed).toBe(true);
      expect(await refunded(chargeId)).toEqual({ n: 1, sum: 60 });
      // what is left is 40, not 100 - 2 × 60
      expect(await refund(app, { user, key: randomUUID(), chargeId, amount: 50 })).toMatchObject({
        status: 400,
        message: 'Cannot refund 50: only 40 of the 100 charged is left to refund.',
      });
      expect(await refund(app, { user, key: randomUUID(), chargeId, amount: 40 })).toMatchObject({
        status: 200,
        replayed: false,
      });
      expect(await refunded(chargeId)).toEqual({ n: 2, sum: 100 });
    });

    it("a refund of another user's charge: 404, nothing refunded", async () => {
      const chargeId = await newCharge(randomUUID(), 100);
      expect(await refund(app, { user: randomUUID(), key: randomUUID(), chargeId, amount: 10 })).toMatchObject({
        status: 404,
        message: `No charge ${chargeId} for you.`,
      });
      expect(await refunded(chargeId)).toEqual({ n: 0, sum: 0 });
    });
  },
);

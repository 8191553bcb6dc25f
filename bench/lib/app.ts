/**
 * The operation every server variant runs: one Redis INCR, and a result of
 * about 200 bytes of JSON. Baselines and idempotent variants share it.
 */
/** The application's Redis client, as pay uses it: an ioredis `Redis` or a node-redis client. */
export interface Incr {
  incr(key: string): Promise<number>;
}

export interface PayInput {
  amount: number;
  currency: string;
}

export interface PayResult {
  id: string;
  amount: number;
  currency: string;
  status: 'succeeded';
  created: number;
  description: string;
}

/** The request body every load run sends (the tRPC input, and the Express body). */
export const PAY_BODY = JSON.stringify({ amount: 4200, currency: 'eur' } satisfies PayInput);

const DESCRIPTION = 'Benchmark payment: one Redis INCR per call; this text pads the result to about two hundred bytes.';

export async function pay(redis: Incr, input: PayInput): Promise<PayResult> {
  const n = await redis.incr('bench:payments');
  return {
    id: `pay_${n}`,
    amount: input.amount,
    currency: input.currency,
    status: 'succeeded',
    created: 1_700_000_000_000 + n,
    description: DESCRIPTION,
  };
}

/** A hand-written input parser (tRPC accepts a function): the same cheap check for every variant. */
export function parsePayInput(raw: unknown): PayInput {
  const value = raw as Partial<PayInput> | null;
  if (
    typeof value !== 'object' ||
    value === null ||
    typeof value.amount !== 'number' ||
    typeof value.currency !== 'string'
  ) {
    throw new Error('expected { amount: number, currency: string }');
  }
  return { amount: value.amount, currency: value.currency };
}

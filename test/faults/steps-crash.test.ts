/**
 * Recovery points under crashes: the checkout server (three parts: step
 * 'reserve' calls the inventory service, step 'charge' the payment provider,
 * then a ledger row) is SIGKILLed at each point of a checkout, on Redis and on
 * PostgreSQL, and a second server, already running, takes the retries with
 * the same key. Every process is real: two fake downstream services that
 * dedupe by Idempotency-Key and count their effects, the servers, Redis,
 * PostgreSQL.
 *
 * Per kill point, OPS checkouts run on one server, which dies once all of
 * them are at the point (for the points inside a downstream call, the
 * service kills it after applying every effect, before answering any): each
 * checkout is a trial, and one process start serves them all.
 *
 * After the crash: each downstream effect happened once per checkout, each
 * step completed once (a completed step is resumed, never run again; only the
 * step the crash interrupted runs its fn again, with the same downstream key),
 * one ledger row per checkout, and a further retry replays the answer.
 *
 * The ledger row is written after the last step; the last kill point is after
 * that write, before the outcome is stored. On PostgreSQL the write is in the
 * store's transaction (transactional mode): the crash rolls it back and the
 * retry writes it again. On Redis no transaction spans the store and the
 * ledger: the row is keyed by stepKey('ledger'), and the retry finds it.
 */
import { createHash, randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordId } from '../../src/core.js';
import { isolatedSchema, type PgSchema } from '../helpers/postgres.js';
import { connectRedis, deleteByPrefix, uniquePrefix } from '../helpers/redis.js';
import { createClient, rejectionOf, type Seen, sleep } from '../helpers/trpc.js';
import type { CheckoutRouter, Downstream } from './helpers/steps/checkout-server.js';
import {
  arm,
  type CheckoutEnv,
  linesOf,
  type Proc,
  type Service,
  startCheckout,
  startService,
  statusOf,
} from './helpers/steps/harness.js';
import { type KillPoint, POINTS } from './helpers/steps/points.js';

/** Checkouts per kill point and store, all killed together. */
const OPS = 6;
/**
 * Short, so that a dead server's claims expire quickly, yet long enough for a
 * live server starved of CPU on a shared 2-core machine to renew its claims
 * (every lockTtl / 3) before they expire: a trial must not lose a claim before the crash.
 */
const LOCK_TTL = 1_500;
const STORE_TIMEOUT = 500;
/** A busy 2-core machine can be slow: the bound on a recovery is generous, never a speed claim. */
const SLACK = 5_000;
/** How long a server may take to answer its first checkouts. */
const WARM_UP_WITHIN = 20_000;
/** How long the checkouts may take to reach the kill point. */
const CRASH_WITHIN = 10_000;
const STEPS = ['reserve', 'charge'] as const;
/** A step key, as stepKey(name) derives it: a UUID version 8. */
const STEP_KEY = /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
type Variant = 'redis' | 'postgres';

/** What each kill point leaves behind: the steps recorded, and which effects happened downstream. */
const AT_CRASH: Record<KillPoint, { recorded: number; started: number; reserved: number; charged: number }> = {
  'before-reserve': { recorded: 0, started: 0, reserved: 0, charged: 0 },
  'in-reserve': { recorded: 0, started: 1, reserved: 1, charged: 0 },
  between: { recorded: 1, started: 1, reserved: 1, charged: 0 },
  'in-charge': { recorded: 1, started: 2, reserved: 1, charged: 1 },
  'after-ledger': { recorded: 2, started: 2, reserved: 1, charged: 1 },
};

const redis = connectRedis();
const prefix = uniquePrefix('steps-crash');
const procs: Proc[] = [];
let inventory: Service;
let payment: Service;
let schema: PgSchema;
const envOf = (variant: Variant): CheckoutEnv => ({
  STORE: variant,
  DATABASE_URL: schema.url,
  INVENTORY_URL: inventory.url,
  PAYMENT_URL: payment.url,
  LOCK_TTL: String(LOCK_TTL),
  STORE_TIMEOUT: String(STORE_TIMEOUT),
  PREFIX: prefix,
});

/**
 * A checkout server, started and warmed up with OPS checkouts at once, as a
 * trial sends them: the first checkouts load and compile what a cold process
 * would while holding claims, and open the connections of its PostgreSQL
 * pool (until then, a store call can outlast storeTimeout: a 503, retried).
 */
async function startWarm(name: string, variant: Variant): Promise<Proc> {
  const proc = await startCheckout(name, envOf(variant));
  procs.push(proc);
  const client = createClient<CheckoutRouter>(proc.url);
  const warmUp = async (i: number) => {
    const input = { sku: `warm-up-${i}`, quantity: 1, amount: 1 };
    const key = randomUUID();
    const started = performance.now();
    for (;;) {
      try {
        return await client.checkout.mutate(input, { context: { key } });
      } catch (error) {
        const refusal = statusOf(error);
        // A claim that timed out may land late and hold the key until it expires: 409.
        if (performance.now() - started > WARM_UP_WITHIN || !(storeTooSlow(refusal) || refusal.status === 409)) {
          throw error;
        }
        await sleep(100);
      }
    }
  };
  await warmUp(-1);
  await Promise.all(Array.from({ length: OPS }, (_, i) => warmUp(i)));
  return proc;
}

/**
 * The servers, one per (store, kill point) to kill and one per store to take
 * the retries, all started before the first trial, two at a time: a start
 * costs a second or two of CPU, and a server starved of it while it holds
 * claims misses renewals (lockTtl is short), which a trial must not mix up
 * with a crash.
 */
const servers = new Map<string, Proc>();
async function startServers(): Promise<void> {
  const names = (['redis', 'postgres'] as const).flatMap((variant) =>
    ['survivor', ...POINTS].map((role) => ({ variant, role })),
  );
  const lane = async () => {
    for (let next = names.shift(); next !== undefined; next = names.shift()) {
      servers.set(`${next.variant} ${next.role}`, await startWarm(`${next.role}-${next.variant}`, next.variant));
    }
  };
  await Promise.all([lane(), lane()]);
}

/** The hash events name a checkout's key by (scope 'global': no scope): SHA-256 of its record id, 16 hex digits. */
const keyHashOf = (key: string) =>
  createHash('sha256')
    .update(recordId(undefined, 'checkout', key))
    .digest('hex')
    .slice(0, 16);

/** Figures of each run, printed at the end. */
const figures: string[] = [];

beforeAll(async () => {
  [inventory, payment, schema] = await Promise.all([
    startService('inventory'),
    startService('payment'),
    isolatedSchema('steps_crash'),
  ]);
  procs.push(inventory, payment);
  await schema.pool.query(
    `create table ledger (id serial primary key, op_key text not null, entry_key text not null,
       reservation text not null, charge text not null, pid integer not null)`,
  );
  await startServers();
});

afterAll(async () => {
  await Promise.all(procs.map((p) => p.kill('SIGKILL')));
  await deleteByPrefix(redis, prefix);
  redis.disconnect();
  await schema?.drop();
  if (figures.length > 0) console.log(`steps-crash, ${OPS} checkouts per row:\n${figures.join('\n')}`);
});

/** The steps recorded in the store, over every operation of the store. */
async function recordedSteps(variant: Variant): Promise<number> {
  if (variant === 'postgres') {
    const { rows } = await schema.pool.query<{ n: string }>('select count(*) as n from idempotency_steps');
    return Number(rows[0]!.n);
  }
  let total = 0;
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*:steps`, 'COUNT', 1000);
    for (const key of keys) total += Number(await redis.hget(key, 'n'));
    cursor = next;
  } while (cursor !== '0');
  return total;
}

async function ledgerRows(keys: string[]): Promise<{ opKey: string; id: number; pid: number }[]> {
  const { rows } = await schema.pool.query<{ opKey: string; id: number; pid: number }>(
    'select op_key as "opKey", id, pid from ledger where op_key = any($1)',
    [keys],
  );
  return rows;
}

/** `promise`, or a failure with `message()` if it takes longer than `ms`. */
async function within<T>(promise: Promise<T>, ms: number, message: () => string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message())), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The answers of a store slower than storeTimeout, which a client retries: a
 * claim not answered (503), a step's record not confirmed (500 `step_unrecorded`).
 * On a shared 2-core machine, under load, they happen.
 */
function storeTooSlow(refusal: { status: number; reason?: string }): boolean {
  return (
    (refusal.status === 503 && refusal.reason === 'store_unavailable') ||
    (refusal.status === 500 && refusal.reason === 'step_unrecorded')
  );
}

interface Checkout {
  key: string;
  input: { sku: string; quantity: number; amount: number };
}

interface Recovery {
  answer: { reservation: Downstream; charge: Downstream; ledgerId: number };
  replayed: string | null;
  /** 409 answers before the success: the dead server's claim was still alive. */
  conflicts: number;
  /** 503 answers before the success: the store did not answer a claim within storeTimeout (a loaded machine). */
  unavailable: number;
  /** 500 `step_unrecorded` answers: a step ran, but its record did not land within storeTimeout; it runs again. */
  unrecorded: number;
  /** From the crash to the answer. */
  ms: number;
}

/**
 * Retries `op` on `url` until it is answered, as a client retries a 409 or a
 * 503; any other answer fails the test.
 */
async function retryUntilDone(url: string, op: Checkout, started: number): Promise<Recovery> {
  const seen: Seen = [];
  const client = createClient<CheckoutRouter>(url, { seen });
  let conflicts = 0;
  let unavailable = 0;
  let unrecorded = 0;
  for (;;) {
    try {
      const answer = await client.checkout.mutate(op.input, { context: { key: op.key } });
      const replayed = seen.at(-1)!.get('idempotent-replayed');
      return { answer, replayed, conflicts, unavailable, unrecorded, ms: performance.now() - started };
    } catch (error) {
      const refusal = statusOf(error);
      if (storeTooSlow(refusal)) {
        if (refusal.status === 503) unavailable++;
        else unrecorded++;
      } else {
        expect(refusal).toEqual({ status: 409, reason: 'in_progress' });
        conflicts++;
      }
      if (performance.now() - started > LOCK_TTL + SLACK) {
        throw new Error(
          `${op.key}: still refused ${SLACK} ms after the claim expired (${conflicts} 409s, ${unavailable + unrecorded} store timeouts)`,
        );
      }
      await sleep(50);
    }
  }
}

describe.each<Variant>(['redis', 'postgres'])('checkout on %s, its server SIGKILLed', (variant) => {
  let survivor: Proc;
  beforeAll(() => {
    survivor = servers.get(`${variant} survivor`)!;
  });

  it.each(POINTS)('at %s: the retry on another server finishes it; every effect and step once', async (point) => {
    const expected = AT_CRASH[point];
    const victim = servers.get(`${variant} ${point}`)!;
    await arm(victim, point, OPS);
    const ops: Checkout[] = Array.from({ length: OPS }, (_, i) => ({
      key: randomUUID(),
      input: { sku: `sku-${i}`, quantity: i + 1, amount: 100 * (i + 1) },
    }));

    // The crash: no checkout gets an answer.
    const client = createClient<CheckoutRouter>(victim.url);
    const crashed = Promise.all(
      ops.map((op) => rejectionOf(client.checkout.mutate(op.input, { context: { key: op.key } }))),
    );
    const [failures] = await within(
      Promise.all([crashed, victim.exited]),
      CRASH_WITHIN,
      () =>
        `${victim.name} was not killed within ${CRASH_WITHIN} ms: not all ${OPS} checkouts reached ${point}. Its output:\n${victim.lines.join('\n')}`,
    );
    expect(victim.process.signalCode).toBe('SIGKILL');
    for (const failure of failures) expect(statusOf(failure).status).toBe(0);

    const diedAt = performance.now();

    // What the crash left, read at once (the dead server's claims are expiring): checked once the retries run.
    const [atCrash, inv, pay, ledgerAtCrash] = await Promise.all([
      recordedSteps(variant),
      inventory.stats(),
      payment.stats(),
      ledgerRows(ops.map((op) => op.key)),
    ]);
    // The retries, on the server that is still up.
    const recovering = Promise.all(ops.map((op) => retryUntilDone(survivor.url, op, diedAt)));
    recovering.catch(() => {}); // awaited below, unless an assertion fails first

    // Each checkout died at the point, with these steps recorded and these effects done.
    expect(atCrash).toBe(OPS * expected.recorded);
    const victimWrote = point === 'after-ledger' && variant === 'redis';
    expect(ledgerAtCrash).toHaveLength(victimWrote ? OPS : 0);
    for (const op of ops) {
      expect(victim.lines).toContain(`point ${point} ${op.key}`);
      expect(linesOf([victim], 'step', op.key)).toEqual(STEPS.slice(0, expected.recorded).map((s) => `${s} ran`));
      expect(linesOf([victim], 'fn', op.key)).toEqual(STEPS.slice(0, expected.started));
      expect(inv.operations[op.key]?.effects ?? 0).toBe(expected.reserved);
      expect(pay.operations[op.key]?.effects ?? 0).toBe(expected.charged);
    }
    const recoveries = await recovering;

    const [invAfter, payAfter] = await Promise.all([inventory.stats(), payment.stats()]);
    for (const [i, op] of ops.entries()) {
      const { answer, replayed, unrecorded } = recoveries[i]!;
      expect(replayed).not.toBe('true');
      // A step whose record timed out, or whose claim the survivor lost (starved of CPU for lockTtl), ran
      // again (with the same downstream key): more calls, never more effects.
      const lost = survivor.lines.filter((line) => line.startsWith(`lost ${keyHashOf(op.key)} `)).length;
      if (lost > 0) figures.push(`${variant} ${point}: ${op.key}'s claim lost on the survivor ${lost} time(s)`);
      const again = unrecorded + lost;
      const calls = (n: number) => (again === 0 ? n : expect.toSatisfy((c: number) => c >= n));

      // Each downstream effect once, under one key; the step cut off in its call sent that key twice.
      const reserved = invAfter.operations[op.key]!;
      expect(reserved).toMatchObject({ effects: 1, calls: calls(point === 'in-reserve' ? 2 : 1) });
      expect(reserved.keys).toEqual([expect.stringMatching(STEP_KEY)]);
      expect(answer.reservation).toEqual(reserved.responses[reserved.keys[0]!]);
      const charged = payAfter.operations[op.key]!;
      expect(charged).toMatchObject({ effects: 1, calls: calls(point === 'in-charge' ? 2 : 1) });
      expect(charged.keys).toEqual([expect.stringMatching(STEP_KEY)]);
      expect(answer.charge).toEqual(charged.responses[charged.keys[0]!]);
      expect(answer.charge.input).toEqual({ amount: op.input.amount, reservation: answer.reservation.id });

      // Each step completed once: resumed where it was recorded, run where it was not.
      const ran = linesOf([victim, survivor], 'step', op.key).filter((l) => l.endsWith(' ran'));
      expect(ran.sort()).toEqual(['charge ran', 'reserve ran']);
      // (an attempt cut short, its claim lost or a record timed out, resumed the same steps before the next did)
      const survivorSteps = linesOf([survivor], 'step', op.key);
      expect(again === 0 ? survivorSteps : [...new Set(survivorSteps)]).toEqual(
        STEPS.map((s, n) => `${s} ${n < expected.recorded ? 'resumed' : 'ran'}`),
      );
      const survivorRuns = linesOf([survivor], 'fn', op.key);
      if (again === 0) expect(survivorRuns).toEqual(STEPS.slice(expected.recorded));
      else expect(new Set(survivorRuns)).toEqual(new Set(STEPS.slice(expected.recorded)));

      // One ledger row: on PostgreSQL the survivor's (the victim's was rolled back), on Redis whoever wrote it first.
      expect(await ledgerRows([op.key])).toEqual([
        { opKey: op.key, id: answer.ledgerId, pid: victimWrote ? victim.process.pid : survivor.process.pid },
      ]);

      // A further retry replays the stored answer.
      const seen: Seen = [];
      const replay = await createClient<CheckoutRouter>(survivor.url, { seen }).checkout.mutate(op.input, {
        context: { key: op.key },
      });
      expect(replay).toEqual(answer);
      expect(seen[0]!.get('idempotent-replayed')).toBe('true');
    }
    // The replays ran nothing downstream; the completions deleted the recorded steps.
    const [invEnd, payEnd] = await Promise.all([inventory.stats(), payment.stats()]);
    for (const op of ops) {
      expect(invEnd.operations[op.key]!.calls).toBe(invAfter.operations[op.key]!.calls);
      expect(payEnd.operations[op.key]!.calls).toBe(payAfter.operations[op.key]!.calls);
    }
    expect(await recordedSteps(variant)).toBe(0);

    const conflicts = recoveries.map((r) => r.conflicts);
    const slow = recoveries.reduce((n, r) => n + r.unavailable + r.unrecorded, 0);
    const ms = recoveries.map((r) => Math.round(r.ms));
    figures.push(
      `${variant.padEnd(8)} ${point.padEnd(14)} 409s before success ${conflicts.join('/')}${slow > 0 ? ` (and ${slow} store timeouts)` : ''}, answered ${ms.join('/')} ms after the crash`,
    );
    // The dead server's claim kept the key until it expired: at least one retry met it.
    expect(Math.max(...conflicts)).toBeGreaterThan(0);
  });
});

/**
 * What each path costs the store, measured through the engine from dist/:
 * Redis commands (INFO commandstats deltas on the bench's own redis-server),
 * PostgreSQL statements (counted at the driver), Redis bytes per record.
 */
import { randomUUID } from 'node:crypto';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Redis } from 'ioredis';
import pg from 'pg';
import { drizzleStore } from '../../dist/drizzle.js';
import { createIdempotencyEngine, type IdempotencyEngine } from '../../dist/index.js';
import { redisStore } from '../../dist/redis.js';
import { commandCalls, delta } from './services.js';

/** The result the records hold: the same ~200-byte JSON the HTTP servers return. */
export const RESULT = {
  id: 'pay_1234567',
  amount: 4200,
  currency: 'eur',
  status: 'succeeded',
  created: 1_700_001_234_567,
  description: 'Benchmark payment: one Redis INCR per call; this text pads the result to about two hundred bytes.',
};
const PAYLOAD = { amount: 4200, currency: 'eur' };
/**
 * How long the waiting duplicates of one key wait (inFlight: 'wait') before its holder completes: twice, to
 * show whether a waiter's cost grows with the holder's duration.
 */
const WAITS_MS = [1_000, 5_000];

interface Held {
  release(): void;
  done: Promise<unknown>;
}

/** Starts `count` executions that hold their claims until released. */
async function holdClaims(
  engine: IdempotencyEngine,
  keys: string[],
  isHeld: (key: string) => Promise<boolean>,
): Promise<Held> {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const done = Promise.all(
    keys.map((key) => engine.run({ key, name: 'pay', payload: PAYLOAD }, () => gate.then(() => RESULT))),
  );
  for (const key of keys) while (!(await isHeld(key))) await new Promise((resolve) => setTimeout(resolve, 5));
  return { release, done };
}

/** Per duplicate of one held key waiting `ms` (inFlight: 'wait') for its holder's outcome. */
export interface RedisWaitCost {
  ms: number;
  /** Commands sent (EVALSHA). */
  sent: number;
  /** Commands the scripts run inside Redis, by name. */
  in_scripts: Record<string, number>;
}

export interface RedisCost {
  /** Commands sent per operation (EVALSHA). */
  first: number;
  replay: number;
  reject: number;
  /** Commands the scripts run inside Redis, per operation, by name. */
  first_in_scripts: Record<string, number>;
  replay_in_scripts: Record<string, number>;
  reject_in_scripts: Record<string, number>;
  /** Waiting duplicates, one entry per duration. */
  waits: RedisWaitCost[];
  /** MEMORY USAGE of one completed record, and used_memory growth per record over many. */
  memory_usage_bytes: number;
  used_memory_bytes_per_record: number;
  body_bytes: number;
}

export async function redisCost(url: string, n = 500): Promise<RedisCost> {
  const client = new Redis(url);
  const admin = new Redis(url);
  const store = redisStore({ client, prefix: 'cost:' });
  const engine = createIdempotencyEngine({ store });
  await engine.run({ key: 'warm-up', name: 'pay', payload: PAYLOAD }, async () => RESULT); // loads the scripts

  async function measure(action: () => Promise<unknown>) {
    const before = await commandCalls(admin);
    await action();
    const all = delta(before, await commandCalls(admin));
    delete all.info;
    // The store's subscriber connection (its handshake, its one SUBSCRIBE), opened once for every waiter.
    delete all.hello;
    delete all.subscribe;
    const sent = (all.evalsha ?? 0) + (all.eval ?? 0);
    delete all.evalsha;
    delete all.eval;
    const inScripts = Object.fromEntries(Object.entries(all).map(([cmd, calls]) => [cmd, calls / n]));
    return { sent: sent / n, inScripts };
  }

  const keys = Array.from({ length: n }, () => randomUUID());
  const first = await measure(async () => {
    for (const key of keys) await engine.run({ key, name: 'pay', payload: PAYLOAD }, async () => RESULT);
  });
  const replay = await measure(async () => {
    for (const key of keys) await engine.run({ key, name: 'pay', payload: PAYLOAD }, async () => RESULT);
  });
  const isHeld = async (key: string) => (await admin.exists(store.keyOf(`:pay:${key}`))) === 1;
  const heldKeys = Array.from({ length: n }, () => randomUUID());
  const held = await holdClaims(engine, heldKeys, isHeld);
  const reject = await measure(async () => {
    for (const key of heldKeys)
      await engine.run({ key, name: 'pay', payload: PAYLOAD }, async () => RESULT).catch(() => {});
  });
  held.release();
  await held.done;

  // n duplicates of one held key wait together; the holder's completion (one script) is counted with them.
  const waiting = createIdempotencyEngine({ store, inFlight: 'wait' });
  const waits: RedisWaitCost[] = [];
  for (const ms of WAITS_MS) {
    const { sent, inScripts } = await waitForHolder(waiting, ms, n, isHeld, measure);
    waits.push({ ms, sent, in_scripts: inScripts });
  }

  // Bytes: one record as MEMORY USAGE reports it, then the server's growth over many.
  const memoryUsage = Number(await admin.call('MEMORY', 'USAGE', store.keyOf(`:pay:${keys[0]}`), 'SAMPLES', '0'));
  const many = 10_000;
  const usedBefore = await usedMemory(admin);
  const manyKeys = Array.from({ length: many }, () => randomUUID());
  for (let i = 0; i < many; i += 100) {
    await Promise.all(
      manyKeys.slice(i, i + 100).map((key) => engine.run({ key, name: 'pay', payload: PAYLOAD }, async () => RESULT)),
    );
  }
  const usedAfter = await usedMemory(admin);
  await store.close();
  client.disconnect();
  admin.disconnect();
  return {
    first: first.sent,
    replay: replay.sent,
    reject: reject.sent,
    first_in_scripts: first.inScripts,
    replay_in_scripts: replay.inScripts,
    reject_in_scripts: reject.inScripts,
    waits,
    memory_usage_bytes: memoryUsage,
    used_memory_bytes_per_record: Math.round((usedAfter - usedBefore) / many),
    body_bytes: JSON.stringify(RESULT).length,
  };
}

/**
 * `n` duplicates of a held key wait `ms` (inFlight: 'wait'), then its holder completes; `measure` counts what
 * the duplicates and the holder's completion cost.
 */
async function waitForHolder<T>(
  engine: IdempotencyEngine,
  ms: number,
  n: number,
  isHeld: (key: string) => Promise<boolean>,
  measure: (action: () => Promise<unknown>) => Promise<T>,
): Promise<T> {
  const key = randomUUID();
  const held = await holdClaims(engine, [key], isHeld);
  const cost = await measure(async () => {
    const duplicates = Array.from({ length: n }, () =>
      engine.run({ key, name: 'pay', payload: PAYLOAD }, async () => RESULT),
    );
    await new Promise((resolve) => setTimeout(resolve, ms));
    held.release();
    await Promise.all(duplicates);
  });
  await held.done;
  return cost;
}

async function usedMemory(redis: Redis): Promise<number> {
  const info = await redis.info('memory');
  return Number(/^used_memory:(\d+)/m.exec(info)![1]);
}

export interface PostgresCost {
  first: number;
  replay: number;
  reject: number;
  /** Statements per duplicate of one held key waiting `ms` (inFlight: 'wait'; the store polls: no notifications). */
  waits: { ms: number; statements: number }[];
}

/** Statements per operation, counted where the driver sends them (each one round trip). */
export async function postgresCost(url: string, n = 200): Promise<PostgresCost> {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  let statements = 0;
  const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
  (pool as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
    statements++;
    return query(...args);
  };
  const engine = createIdempotencyEngine({ store: drizzleStore({ db: drizzle(pool) }) });
  const measure = async (action: () => Promise<unknown>) => {
    const before = statements;
    await action();
    return (statements - before) / n;
  };
  const keys = Array.from({ length: n }, () => randomUUID());
  const first = await measure(async () => {
    for (const key of keys) await engine.run({ key, name: 'pay', payload: PAYLOAD }, async () => RESULT);
  });
  const replay = await measure(async () => {
    for (const key of keys) await engine.run({ key, name: 'pay', payload: PAYLOAD }, async () => RESULT);
  });
  const heldKeys = Array.from({ length: n }, () => randomUUID());
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  const isHeld = async (key: string) =>
    (await admin.query('select 1 from idempotency_keys where id = $1', [`:pay:${key}`])).rowCount === 1;
  const held = await holdClaims(engine, heldKeys, isHeld);
  const reject = await measure(async () => {
    for (const key of heldKeys)
      await engine.run({ key, name: 'pay', payload: PAYLOAD }, async () => RESULT).catch(() => {});
  });
  held.release();
  await held.done;
  const waiting = createIdempotencyEngine({ store: drizzleStore({ db: drizzle(pool) }), inFlight: 'wait' });
  const waits: PostgresCost['waits'] = [];
  for (const ms of WAITS_MS) waits.push({ ms, statements: await waitForHolder(waiting, ms, n, isHeld, measure) });
  await admin.end();
  await pool.end();
  return { first, replay, reject, waits };
}

/**
 * The checkout server of test/faults/steps-crash.test.ts: a real tRPC HTTP
 * server (standalone adapter) whose protected mutation `checkout` has two
 * recovery points, then a ledger write. Run in a process of its own:
 *   STORE          'redis' (REDIS_URL, PREFIX) or 'postgres' (DATABASE_URL, whose
 *                  search_path is a migrated schema; the ledger write then runs in
 *                  the store's transaction: transactional mode)
 *   DATABASE_URL   where the `ledger` table is, for both stores
 *   INVENTORY_URL, PAYMENT_URL   the fake downstream services (downstream.ts)
 *   LOCK_TTL, STORE_TIMEOUT      ms
 * and prints `listening <port>` once it listens.
 *
 * `POST /die-at?point=<point>&count=<n>` arms the process: once n checkouts
 * have reached `point` (each waits there for the others), it is SIGKILLed
 * (by itself, or by the downstream service for the `in-*` points), without
 * touching the library:
 *   before-reserve   claimed, no step run
 *   in-reserve       inventory applied the reservation, its answer lost
 *   between          'reserve' recorded, 'charge' not started
 *   in-charge        payment provider applied the charge, its answer lost
 *   after-ledger     both steps recorded, ledger row written, outcome not stored
 *
 * Output lines (stdout is a pipe, written synchronously: lines printed before
 * the kill are not lost), each with the operation's Idempotency-Key:
 *   fn <key> <step>              a step's fn starts (its downstream call follows)
 *   step <key> <step> <reason>   the engine's step event: ran or resumed
 *   point <point> <key>          the process is about to die here
 *   lost <keyHash> <reason>      a claim was lost while its checkout ran (events name the key's hash)
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { initTRPC } from '@trpc/server';
import { createHTTPHandler } from '@trpc/server/adapters/standalone';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Redis } from 'ioredis';
import pg from 'pg';
import { z } from 'zod';
import { drizzleStore } from '../../../../src/drizzle.js';
import {
  type IdempotencyMeta,
  type IdempotencyStore,
  idempotencyErrorFormatter,
  steps,
  withIdempotency,
} from '../../../../src/index.js';
import { redisStore } from '../../../../src/redis.js';
import { type KillPoint, POINTS } from './points.js';

export interface Downstream {
  id: string;
  key: string;
  input?: unknown;
}

const env = (name: string): string => {
  const value = process.env[name];
  if (value === undefined || value === '') throw new Error(`checkout-server: set ${name}`);
  return value;
};
const transactional = env('STORE') === 'postgres';
const inventoryUrl = env('INVENTORY_URL');
const paymentUrl = env('PAYMENT_URL');

// Idle connections are kept: a trial must not wait for new ones (storeTimeout is short).
const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 20, idleTimeoutMillis: 0 });
pool.on('error', () => {});
const db = drizzle(pool);
let store: IdempotencyStore;
let ledgerOf: () => typeof db;
if (transactional) {
  const pgStore = drizzleStore({ db });
  store = pgStore;
  // The row commits with the stored outcome, or is rolled back with a crash before it.
  ledgerOf = () => pgStore.transactionOf() as unknown as typeof db;
} else {
  const client = new Redis(env('REDIS_URL'));
  client.on('error', () => {});
  store = redisStore({ client, prefix: env('PREFIX') });
  ledgerOf = () => db;
}

let armed: KillPoint | undefined;
let count = 1;
let reached = 0;
const request = new AsyncLocalStorage<string>();
const print = (line: string) => process.stdout.write(`${line}\n`);
const forever = () => new Promise<never>(() => {});

/** Dies at `point` if armed for it, once `count` checkouts are there: SIGKILL, no cleanup, no answer. */
async function reach(point: KillPoint, key: string): Promise<void> {
  if (armed !== point) return;
  print(`point ${point} ${key}`);
  if (++reached === count) process.kill(process.pid, 'SIGKILL');
  await forever();
}

/** A downstream call with the step's key; armed for `point`, the service applies the effect, then kills this process. */
async function post(url: string, key: string, operation: string, input: unknown, point: KillPoint) {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'idempotency-key': key,
    'x-operation': operation,
  };
  if (armed === point) {
    print(`point ${point} ${operation}`);
    headers['x-kill-pid'] = String(process.pid);
    headers['x-kill-after'] = String(count);
  }
  const response = await fetch(url, { method: 'POST', headers, body: JSON.stringify(input) });
  if (!response.ok) throw new Error(`${url} answered ${response.status}: ${await response.text()}`);
  return (await response.json()) as Downstream;
}

const t = initTRPC
  .context<{ req: IncomingMessage; res: ServerResponse }>()
  .meta<IdempotencyMeta>()
  .create({ errorFormatter: idempotencyErrorFormatter });
const idempotent = withIdempotency(t.procedure, {
  scope: 'global',
  store,
  lockTtl: Number(env('LOCK_TTL')),
  storeTimeout: Number(env('STORE_TIMEOUT')),
  // Events name a hash of the key; a step event is emitted inside the resolver, in its request's context.
  onEvent: (event) => {
    if (event.result === 'step') print(`step ${request.getStore() ?? '-'} ${event.step} ${event.reason}`);
    // A claim lost while its checkout ran (a process starved of CPU for lockTtl): emitted by its lease, in no request.
    if (event.result === 'lease_lost') print(`lost ${event.keyHash} ${event.reason}`);
  },
});

const router = t.router({
  checkout: idempotent
    .meta({ idempotency: { transaction: transactional } })
    .input(z.object({ sku: z.string(), quantity: z.number().int().positive(), amount: z.number().int().positive() }))
    .mutation(async (opts) => {
      const { input } = opts;
      const { step, stepKey } = steps(opts);
      const key = String(opts.ctx.req.headers['idempotency-key']);
      await reach('before-reserve', key);
      const reservation = await step('reserve', ({ key: reserveKey }) => {
        print(`fn ${key} reserve`);
        return post(
          `${inventoryUrl}/reserve`,
          reserveKey,
          key,
          { sku: input.sku, quantity: input.quantity },
          'in-reserve',
        );
      });
      await reach('between', key);
      const charge = await step('charge', ({ key: chargeKey }) => {
        print(`fn ${key} charge`);
        return post(
          `${paymentUrl}/charge`,
          chargeKey,
          key,
          { amount: input.amount, reservation: reservation.id },
          'in-charge',
        );
      });
      // PostgreSQL: a plain insert in the store's transaction. Redis: no transaction spans
      // the store and the ledger, so the row is keyed by a step key and written once.
      const entry = stepKey('ledger');
      const written = await ledgerOf().execute<{ id: number }>(
        transactional
          ? sql`insert into ledger (op_key, entry_key, reservation, charge, pid)
                values (${key}, ${entry}, ${reservation.id}, ${charge.id}, ${process.pid}) returning id`
          : sql`with inserted as (
                  insert into ledger (op_key, entry_key, reservation, charge, pid)
                  select ${key}, ${entry}, ${reservation.id}, ${charge.id}, ${process.pid}
                  where not exists (select 1 from ledger where entry_key = ${entry})
                  returning id)
                select id from inserted union all select id from ledger where entry_key = ${entry}`,
      );
      await reach('after-ledger', key);
      return { reservation, charge, ledgerId: Number(written.rows[0]!.id) };
    }),
});
export type CheckoutRouter = typeof router;

const handler = createHTTPHandler({ router, createContext: ({ req, res }) => ({ req, res }) });
const server = createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://localhost');
  if (req.method === 'POST' && url.pathname === '/die-at') {
    const point = url.searchParams.get('point') as KillPoint;
    const n = Number(url.searchParams.get('count') ?? 1);
    if (!POINTS.includes(point) || !Number.isInteger(n) || n < 1) {
      res.writeHead(400).end(`point must be one of ${POINTS.join(', ')}; count a positive integer`);
      return;
    }
    armed = point;
    count = n;
    res.writeHead(204).end();
    return;
  }
  const key = req.headers['idempotency-key'];
  request.run(typeof key === 'string' ? key : '-', () => handler(req, res));
});
server.listen(0, '127.0.0.1', () => print(`listening ${(server.address() as AddressInfo).port}`));

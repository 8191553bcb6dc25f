/**
 * How close the PostgreSQL store is to the floor of what PostgreSQL must do:
 * `npm run bench:postgres-floor` (node --import tsx bench/postgres-floor.ts).
 *
 * One connection, one operation at a time, so every figure is one backend's work. Per operation,
 * the backend's CPU time (`/proc/<pid>/task/<tid>/schedstat`: user and system, not the time spent
 * waiting for the WAL's fdatasync) and the wall time the client waited, median of ROUNDS rounds of
 * OPS operations per row, the rows interleaved in each round:
 *
 * - *store, first*: `drizzleStore` from dist/: `claim` of a fresh key, then `complete` (2 statements,
 *   2 commits), as the engine sends them.
 * - *floor, 2 commits*: the least two autocommit statements that can take a key and then record its
 *   outcome, on a table like `idempotency_keys` (same columns and indexes): `insert ... on conflict do
 *   nothing`, then `update ... where id = $1 and token = $2`.
 * - *floor, 1 commit*: the same two statements in one transaction (what a claim taken in the
 *   procedure's own transaction would cost; see docs/performance.md for why the store cannot).
 * - *store, first, synchronous_commit off* and *floor, 2 commits, synchronous_commit off*: the same,
 *   in a session that does not wait for the WAL flush at commit (what the wait costs, and what relaxing
 *   it saves; see docs/performance.md for what it allows).
 * - *store, replay*: `claim` of a completed key (1 statement, no write); *floor, replay*: `select` of
 *   the row by its id.
 *
 * Environment: DATABASE_URL, OPS (per row and round, default 2000), ROUNDS (5).
 */
import { randomUUID } from 'node:crypto';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { drizzleStore } from '../dist/drizzle.js';
import { median } from './lib/aggregate.js';
import { fmt, range, table } from './lib/markdown.js';
import { cpuMicros, createSchema, loadAverage } from './lib/services.js';

const OPS = Number(process.env.OPS ?? 2000);
const ROUNDS = Number(process.env.ROUNDS ?? 5);
const BODY = JSON.stringify({ chargeId: 'ch_3PqR2bLkdIwHu7ix0', amount: 4200, currency: 'eur', status: 'succeeded' });

interface Row {
  name: string;
  /** Runs once before the round's operations (e.g. a session setting). */
  setup?: (client: pg.Client) => Promise<void>;
  /** Prepares what one operation needs (outside the measured window), then returns the operation. */
  prepare(client: pg.Client): Promise<() => Promise<unknown>>;
}

const FLOOR_CLAIM = {
  name: 'floor_claim',
  text: `insert into floor_keys (id, state, fingerprint, token, expires_at, lock_ttl)
         values ($1, 'in_progress', $2, $3, statement_timestamp() + interval '60 s', 60000)
         on conflict (id) do nothing returning 1`,
};
const FLOOR_COMPLETE = {
  name: 'floor_complete',
  text: `update floor_keys set state = 'completed', body = $3, expires_at = statement_timestamp() + interval '1 day',
                lock_ttl = null
          where id = $1 and token = $2 returning 1`,
};
const FLOOR_READ = { name: 'floor_read', text: 'select state, fingerprint, body from floor_keys where id = $1' };

async function main() {
  const schema = await createSchema('floor');
  const client = new pg.Client({ connectionString: schema.url });
  await client.connect();
  try {
    await client.query('create table floor_keys (like idempotency_keys including all)');
    const pid = Number((await client.query('select pg_backend_pid() as pid')).rows[0].pid);
    const store = drizzleStore({ db: drizzle(client) });
    const fresh = () => `:pay:${randomUUID()}`;
    const storeFirst: Row['prepare'] = async () => {
      const id = fresh();
      return async () => {
        const claimed = await store.claim({ id, fingerprint: 'fp', token: id, lockTtl: 60_000 });
        if (claimed.state !== 'acquired') throw new Error(`claim: ${claimed.state}`);
        const stored = await store.complete({
          id,
          fingerprint: 'fp',
          token: id,
          state: 'completed',
          body: BODY,
          ttl: 86_400_000,
        });
        if (stored !== 'stored') throw new Error(`complete: ${stored}`);
      };
    };
    const floorTwo = async (c: pg.Client, id = fresh()) => {
      return async () => {
        if ((await c.query({ ...FLOOR_CLAIM, values: [id, 'fp', id] })).rowCount !== 1) throw new Error('floor claim');
        if ((await c.query({ ...FLOOR_COMPLETE, values: [id, id, BODY] })).rowCount !== 1)
          throw new Error('floor complete');
      };
    };
    const syncOn = async (c: pg.Client) => void (await c.query('set synchronous_commit = on'));
    const syncOff = async (c: pg.Client) => void (await c.query('set synchronous_commit = off'));
    const rows: Row[] = [
      { name: 'store, first', setup: syncOn, prepare: storeFirst },
      { name: 'floor, 2 commits', setup: syncOn, prepare: (c) => floorTwo(c) },
      {
        name: 'floor, 1 commit',
        setup: syncOn,
        prepare: async (c) => {
          const id = fresh();
          return async () => {
            await c.query('begin');
            await c.query({ ...FLOOR_CLAIM, values: [id, 'fp', id] });
            await c.query({ ...FLOOR_COMPLETE, values: [id, id, BODY] });
            await c.query('commit');
          };
        },
      },
      { name: 'store, first, synchronous_commit off', setup: syncOff, prepare: storeFirst },
      { name: 'floor, 2 commits, synchronous_commit off', setup: syncOff, prepare: (c) => floorTwo(c) },
      {
        name: 'store, replay',
        setup: syncOn,
        // a key completed beforehand, a new one per operation (as a retry would read)
        prepare: async () => {
          const id = fresh();
          await store.claim({ id, fingerprint: 'fp', token: id, lockTtl: 60_000 });
          await store.complete({ id, fingerprint: 'fp', token: id, state: 'completed', body: BODY, ttl: 86_400_000 });
          return async () => {
            const replay = await store.claim({ id, fingerprint: 'fp', token: randomUUID(), lockTtl: 60_000 });
            if (replay.state !== 'completed') throw new Error(`replay: ${replay.state}`);
          };
        },
      },
      {
        name: 'floor, replay',
        setup: syncOn,
        prepare: async (c) => {
          const id = fresh();
          await (await floorTwo(c, id))();
          return async () => {
            if ((await c.query({ ...FLOOR_READ, values: [id] })).rowCount !== 1) throw new Error('floor read');
          };
        },
      },
    ];
    const results = new Map<string, { cpu: number[]; wall: number[] }>(
      rows.map((r) => [r.name, { cpu: [], wall: [] }]),
    );
    // one round untimed first: plans cached, the table's pages in memory
    for (let round = 0; round <= ROUNDS; round++) {
      for (const row of round % 2 === 0 ? rows : [...rows].reverse()) {
        await row.setup?.(client);
        const operations: (() => Promise<unknown>)[] = [];
        for (let i = 0; i < OPS; i++) operations.push(await row.prepare(client));
        const cpu0 = cpuMicros(pid);
        const wall0 = performance.now();
        for (const operation of operations) await operation();
        const wall = ((performance.now() - wall0) * 1_000) / OPS;
        const cpu = (cpuMicros(pid) - cpu0) / OPS;
        if (round > 0) {
          results.get(row.name)!.cpu.push(cpu);
          results.get(row.name)!.wall.push(wall);
        }
      }
      await client.query('set synchronous_commit = on');
    }
    const [load1] = loadAverage();
    const floorFirst = median(results.get('floor, 2 commits')!.cpu);
    console.log(
      `PostgreSQL backend per operation, one connection, ${OPS} operations per row and round, median of ${ROUNDS} rounds (load average ${load1.toFixed(1)}):\n`,
    );
    console.log(
      table(
        ['row', 'backend CPU µs', 'wall µs', 'CPU over the 2-commit floor'],
        'lrrr',
        rows.map((row) => {
          const { cpu, wall } = results.get(row.name)!;
          const over = row.name.includes('first') ? `${fmt(Math.round((median(cpu) / floorFirst - 1) * 100))} %` : '';
          return [
            row.name,
            `${fmt(Math.round(median(cpu)))} (${range(cpu)})`,
            `${fmt(Math.round(median(wall)))} (${range(wall)})`,
            over,
          ];
        }),
      ),
    );
  } finally {
    await client.end();
    await schema.drop();
  }
}

await main();

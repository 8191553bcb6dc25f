/**
 * Statements (each one round trip) the PostgreSQL store sends per path,
 * counted by Drizzle's query logger on a real server.
 */
import { randomUUID } from 'node:crypto';
import { drizzle } from 'drizzle-orm/node-postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordId } from '../../src/core.js';
import { drizzleStore } from '../../src/drizzle.js';
import { createIdempotencyEngine } from '../../src/index.js';
import { isolatedSchema, type PgSchema } from '../helpers/postgres.js';
import { gate } from '../helpers/trpc.js';

let pgs: PgSchema;
const log: string[] = [];
beforeAll(async () => {
  pgs = await isolatedSchema('roundtrips');
});
afterAll(async () => {
  await pgs?.drop();
});

async function statements(action: () => Promise<unknown>): Promise<string[]> {
  log.length = 0;
  await action();
  // The store's statements by what they do; any other by its first word (begin, commit).
  return log.map((q) => (q.includes('claimed as (') ? 'claim' : q.trim().split(/\s+/)[0]!.toLowerCase()));
}

describe('PostgreSQL round trips per request', () => {
  it('first execution: 2; replay: 1; in-flight rejection: 1; transactional first execution: claim + begin, complete, commit', async () => {
    const db = drizzle(pgs.pool, { logger: { logQuery: (query) => void log.push(query) } });
    const store = drizzleStore({ db });
    const engine = createIdempotencyEngine({ store });
    const input = { key: randomUUID(), name: 'pay', payload: { amount: 1 } };

    expect(await statements(() => engine.run(input, async () => 'ok'))).toEqual(['claim', 'insert']);
    expect(await statements(() => engine.run(input, async () => 'ok'))).toEqual(['claim']);

    const running = gate();
    const held = { ...input, key: randomUUID() };
    const holder = engine.run(held, () => running.opened.then(() => 'ok'));
    await expect
      .poll(
        async () =>
          (await pgs.pool.query('select 1 from idempotency_keys where id = $1', [recordId(undefined, 'pay', held.key)]))
            .rowCount,
      )
      .toBe(1);
    expect(await statements(() => engine.run(held, async () => 'ok').catch((e) => e))).toEqual(['claim']);
    running.open();
    await holder;

    const tx = createIdempotencyEngine({ store, transaction: true });
    expect(await statements(() => tx.run({ ...input, key: randomUUID() }, async () => 'ok'))).toEqual([
      'claim',
      'begin',
      'insert',
      'commit',
    ]);
  });
});

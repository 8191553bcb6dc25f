/**
 * Statements (each one round trip) the MySQL/MariaDB store sends per path,
 * counted by Drizzle's query logger on a real server.
 */
import { randomUUID } from 'node:crypto';
import { drizzle } from 'drizzle-orm/mysql2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordId } from '../../src/core.js';
import { drizzleStore } from '../../src/drizzle.js';
import { createIdempotencyEngine } from '../../src/index.js';
import { isolatedDatabase, type MysqlDatabase } from '../helpers/mysql.js';
import { gate } from '../helpers/trpc.js';

let my: MysqlDatabase;
const log: string[] = [];
beforeAll(async () => {
  my = await isolatedDatabase('roundtrips');
});
afterAll(async () => {
  await my?.drop();
});

async function statements(action: () => Promise<unknown>): Promise<string[]> {
  log.length = 0;
  await action();
  // The store's statements by their first words: the claim's read, its insert, the completion's update.
  return log.map((q) =>
    q.includes('left join idempotency_steps s') ? 'read' : q.trim().split(/\s+/)[0]!.toLowerCase(),
  );
}

describe('MySQL round trips per request', () => {
  it('first execution: 3 (read, insert, update); replay: 1; in-flight rejection: 1; transactional: read, insert, begin, update, commit', async () => {
    const db = drizzle(my.pool, { logger: { logQuery: (query) => void log.push(query) } });
    const store = drizzleStore({ db });
    const engine = createIdempotencyEngine({ store });
    const input = { key: randomUUID(), name: 'pay', payload: { amount: 1 } };

    expect(await statements(() => engine.run(input, async () => 'ok'))).toEqual(['read', 'insert', 'update']);
    expect(await statements(() => engine.run(input, async () => 'ok'))).toEqual(['read']);

    const running = gate();
    const held = { ...input, key: randomUUID() };
    const holder = engine.run(held, () => running.opened.then(() => 'ok'));
    await expect
      .poll(async () => {
        const [rows] = await my.pool.query('select 1 from idempotency_keys where id = ?', [
          Buffer.from(recordId(undefined, 'pay', held.key)),
        ]);
        return (rows as unknown[]).length;
      })
      .toBe(1);
    expect(await statements(() => engine.run(held, async () => 'ok').catch((e) => e))).toEqual(['read']);
    running.open();
    await holder;

    const tx = createIdempotencyEngine({ store, transaction: true });
    expect(await statements(() => tx.run({ ...input, key: randomUUID() }, async () => 'ok'))).toEqual([
      'read',
      'insert',
      'begin',
      'update',
      'commit',
    ]);
  });
});

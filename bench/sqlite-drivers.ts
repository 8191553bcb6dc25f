/**
 * The SQLite store in process, per driver and `synchronous` setting: sequential first executions (claim, then
 * completion) and replays (a claim of a completed key) on a WAL file, the library from the built `dist/`.
 * Prints a Markdown table of the median time per operation over ROUNDS rounds (docs/performance.md quotes it).
 *
 *   npm run build && node --import tsx bench/sqlite-drivers.ts      (ROUNDS: 5, CALLS: 500 per round)
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { sqliteFile } from '../test/helpers/sqlite.js';
import { loadAverage } from './lib/services.js';

const ROUNDS = Number(process.env.ROUNDS ?? 5);
const CALLS = Number(process.env.CALLS ?? 500);
const BODY = JSON.stringify({ chargeId: randomUUID(), amount: 1000 });

const { drizzleStore } = (await import(
  new URL('../dist/drizzle.js', import.meta.url).href
)) as typeof import('../dist/drizzle.js');

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const format = (ms: number) => (ms >= 0.1 ? `${ms.toFixed(2)} ms` : `${Math.round(ms * 1000)} µs`);

const rows: string[] = [];
const load = loadAverage();
for (const driver of ['better-sqlite3', 'libsql'] as const) {
  for (const synchronous of ['FULL', 'NORMAL'] as const) {
    const file = await sqliteFile(`drivers-${driver}`);
    try {
      const db = driver === 'better-sqlite3' ? file.better() : file.libsql();
      await db.run(sql.raw(`pragma synchronous = ${synchronous}`));
      const store = drizzleStore({ db });
      const first: number[] = [];
      const replay: number[] = [];
      for (let round = 0; round < ROUNDS + 1; round++) {
        const keys = Array.from({ length: CALLS }, () => `:pay:${randomUUID()}`);
        let started = performance.now();
        for (const id of keys) {
          await store.claim({ id, fingerprint: 'fp', token: id, lockTtl: 30_000 });
          await store.complete({ id, fingerprint: 'fp', token: id, body: BODY, ttl: 600_000, state: 'completed' });
        }
        const firstMs = (performance.now() - started) / CALLS;
        started = performance.now();
        for (const id of keys) await store.claim({ id, fingerprint: 'fp', token: 'retry', lockTtl: 30_000 });
        const replayMs = (performance.now() - started) / CALLS;
        // The first round warms the code up, and is left out.
        if (round > 0) {
          first.push(firstMs);
          replay.push(replayMs);
        }
      }
      rows.push(`| ${driver} | ${synchronous} | ${format(median(first))} | ${format(median(replay))} |`);
    } finally {
      file.drop();
    }
  }
}
console.log(`SQLite store in process, WAL, sequential calls, ${ROUNDS} rounds of ${CALLS}; load average ${load.join(' ')}
| driver | \`synchronous\` | first execution (claim + completion) | replay |
|---|---|---|---|
${rows.join('\n')}`);

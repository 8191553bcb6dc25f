/**
 * Times purgeExpired() over a table of expired rows: `node --import tsx
 * bench/purge.ts <connection string>`. Prints one JSON line.
 */
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { drizzleStore } from '../dist/drizzle.js';

const pool = new pg.Pool({ connectionString: process.argv[2], max: 2 });
const store = drizzleStore({ db: drizzle(pool) });
const batchSize = 1_000;
const started = performance.now();
const deleted = await store.purgeExpired({ batchSize });
const seconds = (performance.now() - started) / 1000;
await pool.end();
process.stdout.write(`${JSON.stringify({ deleted, seconds, batch_size: batchSize })}\n`);

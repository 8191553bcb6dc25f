/**
 * A SQLite writer killed (SIGKILL) mid-operation, as mariadb-restart.test.ts
 * kills MariaDB: app processes on one SQLite file, one killed at each point of
 * a charge while another goes on serving. The kernel drops a dead process's
 * file locks, and SQLite's WAL keeps only committed transactions, so:
 * - killed inside its open write transaction (libSQL, transactional mode,
 *   after the charge's insert): the insert is gone, the claim (committed before
 *   the transaction) lives out its lease, then a retry runs once;
 * - killed between the claim and its completion (better-sqlite3, no
 *   transaction, before the charge): the retry waits out the lease and runs;
 * - killed after the commit, before answering: the retry replays.
 * The file passes SQLite's integrity check after each kill.
 */
import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Point, pay } from '../fixtures/pay-app.js';
import { type Pod, startPod } from '../helpers/pods.js';
import { type SqliteFile, sqliteFile } from '../helpers/sqlite.js';

const LOCK_TTL = 3_000;
let file: SqliteFile;
let reader: Database.Database;
let survivor: Pod;
const pods: Pod[] = [];

const env = () => ({ SQLITE_PATH: file.path, DATABASE_URL: '', MYSQL_URL: '', LOCK_TTL: String(LOCK_TTL) });

beforeAll(async () => {
  file = await sqliteFile('crash');
  survivor = await startPod('survivor', env());
  pods.push(survivor);
  reader = new Database(file.path, { readonly: true });
}, 60_000);
afterAll(async () => {
  await Promise.all(pods.map((p) => p.kill('SIGKILL')));
  reader?.close();
  file?.drop();
});

const rowsFor = (key: string): number =>
  (reader.prepare('select count(*) as n from charges where idem_key = ?').get(key) as { n: number }).n;

/** Starts a pod on `driver`, sends it a charge told to stop at `point`, and SIGKILLs it there. */
async function killedAt(driver: 'libsql' | 'better-sqlite3', point: Point): Promise<{ key: string; killedAt: number }> {
  const victim = await startPod(`victim-${driver}-${point}`, { ...env(), SQLITE_DRIVER: driver });
  pods.push(victim);
  const key = randomUUID();
  const answer = pay(victim.url, key, { amount: 100, point });
  await victim.waitFor(new RegExp(`point ${point} ${key}`));
  await victim.kill('SIGKILL');
  const killed = Date.now();
  // the kill ended the request at the network level
  expect((await answer).status).toBe(0);
  expect(reader.pragma('integrity_check', { simple: true })).toBe('ok');
  return { key, killedAt: killed };
}

/** Retries `key` on the survivor until it answers 200 (409 while the dead claim's lease runs). */
async function retried(key: string) {
  let last = await pay(survivor.url, key, { amount: 100 });
  await expect
    .poll(
      async () => {
        if (last.status !== 200) last = await pay(survivor.url, key, { amount: 100 });
        return last.status;
      },
      { timeout: LOCK_TTL + 10_000, interval: 100 },
    )
    .toBe(200);
  return last;
}

describe('a SQLite writer SIGKILLed mid-operation', () => {
  it('inside its open transaction (libSQL, after the insert): the insert is rolled back, the retry runs once after the lease', async () => {
    const { key, killedAt: killed } = await killedAt('libsql', 'after-write');
    expect(rowsFor(key)).toBe(0);
    // the survivor writes at once: the dead process's write lock went with it
    const other = randomUUID();
    expect((await pay(survivor.url, other, { amount: 1 })).status).toBe(200);
    const result = await retried(key);
    expect(result.replayed).toBe(false);
    expect(Date.now() - killed).toBeGreaterThanOrEqual(LOCK_TTL - 1_000);
    expect(rowsFor(key)).toBe(1);
    expect(await pay(survivor.url, key, { amount: 100 })).toMatchObject({
      status: 200,
      replayed: true,
      chargeId: result.chargeId,
    });
  });

  it('between the claim and its completion (better-sqlite3): the retry takes the key over once its lease ends', async () => {
    const { key } = await killedAt('better-sqlite3', 'before-write');
    expect(rowsFor(key)).toBe(0);
    const result = await retried(key);
    expect(result.replayed).toBe(false);
    expect(rowsFor(key)).toBe(1);
  });

  it('after the commit, before answering: the retry replays the stored outcome', async () => {
    const { key } = await killedAt('libsql', 'after-commit');
    expect(rowsFor(key)).toBe(1);
    const replay = await pay(survivor.url, key, { amount: 100 });
    expect(replay).toMatchObject({ status: 200, replayed: true });
    expect(rowsFor(key)).toBe(1);
  });
});

/**
 * PostgreSQL failover under load: a primary and a streaming standby of this file's own
 * (test/helpers/postgres-replicas.ts, fsync on), the pay app on a node-postgres pool whose
 * connection string is the service address a failover manager moves, and clients that each send
 * fresh keys one after another, retrying a key on 409, 503 and network failures until it answers.
 * After a few seconds the stream to the standby is held back (the standby falls behind, as on a
 * slow network), the primary is killed (SIGKILL of every process), the standby promoted and the
 * service address moved to it; the clients go on, on the same app. Then every key is sent once more.
 *
 * A completion is "acknowledged" when PostgreSQL answered its commit: the store's `complete`
 * resolved `stored`. With a synchronous standby, none is lost and nothing runs twice; with an
 * asynchronous one, the same fault loses what the primary acknowledged while the stream was held,
 * and those keys run again.
 */
import { randomUUID } from 'node:crypto';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '../../src/core.js';
import { recordId } from '../../src/core.js';
import { drizzleStore } from '../../src/drizzle.js';
import { amountOf, type CallResult, type PayApp, pay, startPayApp } from '../fixtures/pay-app.js';
import { type ReplicatedPostgres, startReplicatedPostgres } from '../helpers/postgres-replicas.js';
import { sleep } from '../helpers/redis.js';

// Longer than the hold and the failover: a claim the standby has keeps its key until its holder's
// completion, tried again in the background, reaches the promoted standby.
const LOCK_TTL = 6_000;
const CLIENTS = 32; // and as many pool connections: at most one commit in flight each

interface KeyRecord {
  key: string;
  id: string;
  /** The first 200 answer's chargeId. */
  chargeId?: string;
  answeredAt?: number;
}

interface Trial {
  /** What the primary said of the standby right before the stream was held. */
  syncState: string | undefined;
  keys: KeyRecord[];
  /** Record id → the body PostgreSQL acknowledged storing as `completed`, by the primary. */
  acked: Map<string, string>;
  /** Completions acknowledged while the stream to the standby was held. */
  ackedDuringHold: number;
  /** Record ids whose claim PostgreSQL acknowledged, by the primary. */
  claimed: Set<string>;
  /** Acknowledged completions the promoted standby does not have (state and body), read before any retry reached it. */
  lost: string[];
  /** Keys run more than once. */
  doubles: string[];
  /** Keys whose retry after everything did not replay the first answer (another chargeId, or not a replay). */
  notReplayed: string[];
  /** Keys answered 200 whose row, at the end, is not `completed` with that answer. */
  finalMismatch: string[];
  killedAt: number;
  promotedMs: number;
  /** From the kill to the first 200 answer of a key sent after it. */
  firstAnswerMs: number;
  /** Sending every key once more. */
  replayMs: number;
  wallMs: number;
}

let pgs: ReplicatedPostgres | undefined;
let app: PayApp | undefined;
let pool: pg.Pool | undefined;
/** Set when a test ends: the clients of a failed trial stop. */
let ended = false;
afterEach(async () => {
  ended = true;
  await app?.close();
  await pool?.end().catch(() => {});
  await pgs?.stop();
  [app, pool, pgs] = [undefined, undefined, undefined];
  ended = false;
});

/** A key, retried on 409, 503 and network failures until answered otherwise (within `withinMs`). */
async function untilAnswered(url: string, key: string, withinMs: number): Promise<CallResult> {
  const until = Date.now() + withinMs;
  for (;;) {
    const result = await pay(url, key, { amount: amountOf(key) }, { timeoutMs: 15_000 });
    if (result.status !== 409 && result.status !== 503 && result.status !== 0) return result;
    if (Date.now() > until || ended) throw new Error(`${key} still refused (${result.status}) after ${withinMs} ms`);
    await sleep(50 + Math.random() * 100);
  }
}

/** Resolves when `done()` holds, or after `withinMs`. */
async function until(done: () => boolean, withinMs: number): Promise<void> {
  for (const end = Date.now() + withinMs; !done() && Date.now() < end; ) await sleep(10);
}

interface TrialOptions {
  /** The load runs until the primary has acknowledged this many completions (at most 60 s)... */
  acked: number;
  /** ...then the stream to the standby is held for this long (the load goes on), or... */
  holdMs: number;
  /** ...until the primary has acknowledged this many more completions; then the primary is killed. */
  ackedWhileHeld?: number;
}

/** One trial: the load, the stream held, the kill, the promotion and the move of the service address. */
async function failoverTrial(synchronous: 'on' | false, options: TrialOptions): Promise<Trial> {
  const started = Date.now();
  pgs = await startReplicatedPostgres({ synchronous });
  pool = new pg.Pool({ connectionString: pgs.service.url, max: CLIENTS });
  // Connections die with the primary: without a listener, that would crash the test.
  pool.on('error', () => {});
  const inner = drizzleStore({ db: drizzle(pool) });
  const acked = new Map<string, string>();
  const claimed = new Set<string>();
  let switched = false;
  // The store as the engine sees it, noting what PostgreSQL acknowledged.
  const store: IdempotencyStore = {
    ...inner,
    async claim(input) {
      const result = await inner.claim(input);
      if (result.state === 'acquired' && !switched) claimed.add(input.id);
      return result;
    },
    async complete(input) {
      const result = await inner.complete(input);
      if (result === 'stored' && input.state === 'completed' && !switched) acked.set(input.id, input.body);
      return result;
    },
  };
  app = await startPayApp({ store, lockTtl: LOCK_TTL, storeTimeout: 1_000 });
  const url = app.url;

  const keys: KeyRecord[] = [];
  let sending = true;
  let killedAt = 0;
  let firstAfterKill = 0;
  const clientErrors: string[] = [];
  const client = async () => {
    while (sending && !ended) {
      const key = randomUUID();
      const record: KeyRecord = { key, id: recordId(undefined, 'pay', key) };
      keys.push(record);
      const sentAt = Date.now();
      const result = await untilAnswered(url, key, 30_000).catch((error: Error) => error);
      if (result instanceof Error || result.status !== 200) {
        clientErrors.push(result instanceof Error ? result.message : `${key}: ${result.status} ${result.message}`);
        return;
      }
      record.chargeId = result.chargeId;
      record.answeredAt = Date.now();
      if (killedAt > 0 && sentAt > killedAt && firstAfterKill === 0) firstAfterKill = record.answeredAt;
    }
  };
  const clients = Array.from({ length: CLIENTS }, client);

  await until(() => acked.size >= options.acked, 60_000);
  const syncState = await pgs.syncState();
  pgs.holdStream();
  const ackedBeforeHold = acked.size;
  const { ackedWhileHeld } = options;
  await until(() => ackedWhileHeld !== undefined && acked.size - ackedBeforeHold >= ackedWhileHeld, options.holdMs);
  await pgs.killPrimary();
  killedAt = Date.now();
  await pgs.promote();
  const promotedMs = Date.now() - killedAt;

  // What the promoted standby has, before any request reaches it.
  const standby = new pg.Client({ connectionString: pgs.standby.url });
  await standby.connect();
  const rows = new Map<string, { state: string; body: string | null }>();
  try {
    const { rows: found } = await standby.query('select id, state, body from idempotency_keys');
    for (const row of found) rows.set(row.id, row);
  } finally {
    await standby.end();
  }
  const ackedDuringHold = acked.size - ackedBeforeHold;
  const lost = [...acked]
    .filter(([id, body]) => rows.get(id)?.state !== 'completed' || rows.get(id)?.body !== body)
    .map(([id]) => id);

  switched = true; // until now the service led to the primary only, which answers nothing since the kill
  pgs.serviceToStandby();
  // The clients go on on the same app, now served by the standby, until one key sent after the kill is answered.
  for (const until = Date.now() + 20_000; firstAfterKill === 0 && clientErrors.length === 0; await sleep(20))
    if (Date.now() > until) throw new Error('no key sent after the kill was answered within 20 s');
  sending = false;
  await Promise.all(clients);
  expect(clientErrors).toEqual([]);
  const firstAnswerMs = firstAfterKill - killedAt;

  const replayStarted = Date.now();
  // Every key once more: each must replay its first answer.
  const notReplayed: string[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (next < keys.length) {
        const record = keys[next++]!;
        const again = await untilAnswered(url, record.key, LOCK_TTL + 10_000);
        if (again.status !== 200 || !again.replayed || again.chargeId !== record.chargeId) notReplayed.push(record.key);
      }
    }),
  );

  const replayMs = Date.now() - replayStarted;
  const runs = new Map<string, number>();
  for (const e of app.executions) runs.set(e.key, (runs.get(e.key) ?? 0) + 1);
  const doubles = [...runs].filter(([, n]) => n > 1).map(([key]) => key);

  const final = await pool.query('select id, state, body from idempotency_keys');
  const finalRows = new Map<string, { state: string; body: string }>(final.rows.map((r) => [r.id, r]));
  const finalMismatch = keys
    .filter((r) => {
      const row = finalRows.get(r.id);
      return row?.state !== 'completed' || !row.body.includes(r.chargeId!);
    })
    .map((r) => r.key);

  return {
    syncState,
    keys,
    acked,
    ackedDuringHold,
    claimed,
    lost,
    doubles,
    notReplayed,
    finalMismatch,
    killedAt,
    promotedMs,
    firstAnswerMs,
    replayMs,
    wallMs: Date.now() - started,
  };
}

function report(label: string, trial: Trial, app: PayApp): void {
  const completionErrors = app.events.filter((e) => e.result === 'store_error' && e.operation === 'complete').length;
  const lateCompletions = app.events.filter((e) => e.result === 'completed' && e.reason === 'completed_late').length;
  console.info(
    `[postgres failover, ${label}] ${trial.keys.length} keys, ${trial.claimed.size} claims and ${trial.acked.size} ` +
      `completions acknowledged before the kill (${trial.ackedDuringHold} while the stream was held), ${trial.lost.length} acknowledged completions lost, ` +
      `${trial.doubles.length} keys run twice, ${trial.notReplayed.length} not replayed, ` +
      `${completionErrors} failed completions, ${lateCompletions} completed late, promoted ${trial.promotedMs} ms ` +
      `after the kill, first new key answered ${trial.firstAnswerMs} ms after it, every key sent again in ${trial.replayMs} ms, trial ${trial.wallMs} ms`,
  );
}

describe('PostgreSQL failover mid-load', () => {
  it('to a synchronous standby (synchronous_commit on): no acknowledged completion lost, nothing runs twice', async () => {
    const trial = await failoverTrial('on', { acked: 2_000, holdMs: 1_000 });
    report('synchronous standby', trial, app!);
    expect(trial.syncState).toBe('sync');
    expect(trial.acked.size).toBeGreaterThanOrEqual(2_000);
    // The held stream held the commits back: only those the standby had flushed before were acknowledged.
    expect(trial.ackedDuringHold).toBeLessThanOrEqual(CLIENTS);
    expect(trial.lost).toEqual([]);
    expect(trial.doubles).toEqual([]);
    expect(trial.notReplayed).toEqual([]);
    expect(trial.finalMismatch).toEqual([]);
    expect(app!.executions.length).toBe(trial.keys.length);
  });

  it('to an asynchronous standby behind the primary: what the primary acknowledged meanwhile is lost and runs again', async () => {
    const trial = await failoverTrial(false, { acked: 600, holdMs: 5_000, ackedWhileHeld: 150 });
    report('asynchronous standby', trial, app!);
    expect(trial.syncState).toBe('async');
    expect(trial.acked.size).toBeGreaterThanOrEqual(750);
    // The primary went on acknowledging while the standby fell behind, and the promoted standby lacks those.
    expect(trial.ackedDuringHold).toBeGreaterThanOrEqual(150);
    expect(trial.lost.length).toBeGreaterThanOrEqual(trial.ackedDuringHold - CLIENTS);
    expect(trial.lost.length).toBeGreaterThan(100);
    // Each key whose completion was lost ran again, and its retry got another charge.
    const lostIds = new Set(trial.lost);
    const lostKeys = trial.keys.filter((r) => lostIds.has(r.id)).map((r) => r.key);
    expect(lostKeys.length).toBe(trial.lost.length);
    const doubles = new Set(trial.doubles);
    const notReplayed = new Set(trial.notReplayed);
    const finalMismatch = new Set(trial.finalMismatch);
    expect(lostKeys.filter((key) => !doubles.has(key) || !notReplayed.has(key) || !finalMismatch.has(key))).toEqual([]);
  });
});

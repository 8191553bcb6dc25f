import { claimedBefore, forget, inspect, summary } from '../../core/protocol/reads.js';
import {
  claim,
  complete,
  extend,
  type Kept,
  live,
  release,
  type StoredRecord,
  type StoredSteps,
  saveStep,
  type Transition,
} from '../../core/protocol/record.js';
import { nameOfRecordId } from '../../core/record-id.js';
import type { RecordSummary } from '../../core/store-admin.js';
import { SHARD_CALLS, type ShardCall, type ShardCalls, type ShardListInput, type ShardListPage } from './calls.js';
import type { ShardSql, ShardState, SqlValue } from './runtime.js';

// Bodies are kept as JSON strings: SQLite's UTF-8 would turn a lone surrogate into U+FFFD, and JSON escapes it.
const SCHEMA = `
CREATE TABLE IF NOT EXISTS idempotency_records (
  id TEXT PRIMARY KEY,
  state TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  token TEXT NOT NULL,
  body TEXT,
  claimed_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  lock_ttl INTEGER,
  waiting INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS idempotency_records_expiry ON idempotency_records (expires_at);
CREATE TABLE IF NOT EXISTS idempotency_steps (
  id TEXT PRIMARY KEY,
  fingerprint TEXT NOT NULL,
  steps TEXT NOT NULL,
  expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS idempotency_steps_expiry ON idempotency_steps (expires_at);
`;

const RECORD_COLUMNS = 'id, state, fingerprint, token, body, claimed_at, expires_at, lock_ttl, waiting';

/** What is kept under one id, as read: the record's `waiting` flag beside it (the protocol has none). */
interface Loaded {
  kept: Kept;
  waiting: boolean;
}

const recordOf = (row: Record<string, SqlValue>): StoredRecord => ({
  state: row.state as StoredRecord['state'],
  fingerprint: row.fingerprint as string,
  token: row.token as string,
  body: row.body === null ? undefined : (JSON.parse(row.body as string) as string),
  claimedAt: row.claimed_at as number,
  expiresAt: row.expires_at as number,
  lockTtl: row.lock_ttl === null ? undefined : (row.lock_ttl as number),
  meta: undefined,
});

/**
 * The Durable Object that keeps the records of one shard (see
 * `durableObjectStore`): export it from the Worker's main module and bind it,
 * SQLite-backed (`new_sqlite_classes`). Each call runs as one synchronous
 * SQLite transaction, so no other call of the shard sees it half done, and its
 * answer leaves once the write is durable. The rules are the protocol's
 * (core/protocol/record.ts), over rows; the clock is the object's `Date.now()`.
 */
export class IdempotencyShard {
  /**
   * How long at least between two sweeps of expired rows by the object's
   * alarm, in ms. Expired rows are ignored by every call the moment they
   * expire; the sweep only gives their room back. A subclass may change it.
   */
  protected readonly sweepInterval: number = 60_000;
  readonly #storage: ShardState['storage'];
  readonly #sql: ShardSql;
  /** The pending alarm (null: none), as last set or read. */
  #alarmAt: number | null = null;
  #sweptAt = 0;

  constructor(ctx: ShardState, _env?: unknown) {
    let sql: ShardSql | undefined;
    try {
      sql = ctx.storage.sql;
    } catch {
      // not SQLite-backed: absent, or a getter that throws (workerd's statements throw, saying what to declare)
    }
    if (sql === undefined) {
      throw new Error(
        'IdempotencyShard needs SQLite storage: declare its class under new_sqlite_classes in the migrations of wrangler.jsonc (a class first deployed with key-value storage cannot be changed: give the binding a new class name).',
      );
    }
    this.#storage = ctx.storage;
    this.#sql = sql;
    sql.exec(SCHEMA);
    void ctx.blockConcurrencyWhile(async () => {
      this.#alarmAt = await ctx.storage.getAlarm();
    });
  }

  async fetch(request: Request): Promise<Response> {
    const call = new URL(request.url).pathname.slice(1) as ShardCall;
    if (request.method !== 'POST' || !SHARD_CALLS.includes(call)) {
      return Response.json(
        {
          error: `IdempotencyShard: no call ${request.method} /${call}; the store POSTs one of ${SHARD_CALLS.join(', ')}.`,
        },
        { status: 400 },
      );
    }
    try {
      const input = (await request.json()) as never;
      const now = Date.now();
      const [answer, expiresAt] = this.#storage.transactionSync(() => this.#run(call, input, now));
      if (expiresAt !== undefined) await this.#schedule(expiresAt, now);
      return Response.json({ answer });
    } catch (error) {
      return Response.json({ error: `IdempotencyShard: ${call} failed: ${String(error)}` }, { status: 500 });
    }
  }

  /** Deletes the rows that expired, and sets the alarm for the next expiry. */
  async alarm(): Promise<void> {
    const now = Date.now();
    const next = this.#storage.transactionSync(() => {
      this.#sql.exec('DELETE FROM idempotency_records WHERE expires_at <= ?', now);
      this.#sql.exec('DELETE FROM idempotency_steps WHERE expires_at <= ?', now);
      const [row] = this.#sql
        .exec(
          'SELECT min(e) AS next FROM (SELECT min(expires_at) AS e FROM idempotency_records UNION ALL SELECT min(expires_at) FROM idempotency_steps)',
        )
        .toArray();
      return row?.next as number | null;
    });
    this.#sweptAt = now;
    this.#alarmAt = null;
    if (next !== null && next !== undefined) await this.#schedule(next, now);
  }

  /** An alarm for the earliest expiry, no sooner than `sweepInterval` after the last sweep. */
  async #schedule(expiresAt: number, now: number): Promise<void> {
    const at = Math.max(expiresAt, this.#sweptAt + this.sweepInterval, now);
    if (this.#alarmAt !== null && this.#alarmAt <= at) return;
    this.#alarmAt = at;
    await this.#storage.setAlarm(at);
  }

  /** One call, inside the transaction: its answer, and the earliest expiry it wrote (for the alarm). */
  #run(call: ShardCall, input: never, now: number): [unknown, number | undefined] {
    switch (call) {
      case 'claim': {
        // `expiresIn` is for the waiters of a store that notifies (src/core/store.ts): these poll, so the rule
        // runs as for a claim that does not wait. The waiter still shows in the operator's reads.
        const { waiting, ...asked } = input as ShardCalls['claim'][0];
        return this.#transition(asked, claim, now, (answer, loaded) => {
          if (waiting === true && answer.state === 'in_progress' && !loaded.waiting) {
            this.#sql.exec('UPDATE idempotency_records SET waiting = 1 WHERE id = ?', asked.id);
          }
        });
      }
      case 'complete':
        return this.#transition(input, complete, now);
      case 'release':
        return this.#transition(input, release, now);
      case 'extend':
        return this.#transition(input, extend, now);
      case 'saveStep':
        return this.#transition(input, saveStep, now);
      case 'forget':
        return this.#transition(input, forget, now);
      case 'inspect': {
        const { id } = input as ShardCalls['inspect'][0];
        const { kept, waiting } = this.#load(id);
        return [inspect(kept.record, kept.steps, input, now, () => waiting), undefined];
      }
      case 'list':
        return [this.#list(input, now), undefined];
      case 'rows': {
        const count = (table: string) => this.#sql.exec(`SELECT count(*) AS n FROM ${table}`).toArray()[0]!.n as number;
        return [count('idempotency_records') + count('idempotency_steps'), undefined];
      }
    }
  }

  /** Runs a protocol transition on the rows of `input.id`, writes what changed, and answers. */
  #transition<I extends { id: string }, A>(
    input: I,
    rule: (kept: Kept | undefined, input: I, now: number) => Transition<A>,
    now: number,
    after?: (answer: A, loaded: Loaded) => void,
  ): [A, number | undefined] {
    const loaded = this.#load(input.id);
    const [kept, answer] = rule(loaded.kept, input, now);
    after?.(answer, loaded);
    return [answer, this.#write(input.id, loaded, kept)];
  }

  #load(id: string): Loaded {
    const [row] = this.#sql.exec(`SELECT ${RECORD_COLUMNS} FROM idempotency_records WHERE id = ?`, id).toArray();
    const [steps] = this.#sql
      .exec('SELECT fingerprint, steps, expires_at FROM idempotency_steps WHERE id = ?', id)
      .toArray();
    return {
      kept: {
        record: row === undefined ? undefined : recordOf(row),
        steps:
          steps === undefined
            ? undefined
            : {
                fingerprint: steps.fingerprint as string,
                steps: JSON.parse(steps.steps as string) as StoredSteps['steps'],
                expiresAt: steps.expires_at as number,
              },
      },
      waiting: row?.waiting === 1,
    };
  }

  /** Writes the rows a transition changed (records are never changed in place: a new one is a new object). */
  #write(id: string, before: Loaded, after: Kept | undefined): number | undefined {
    let earliest: number | undefined;
    const rec = after?.record;
    if (rec !== before.kept.record) {
      if (rec === undefined) this.#sql.exec('DELETE FROM idempotency_records WHERE id = ?', id);
      else {
        // A renewal or a retake keeps its waiter; a new claim or an outcome has none.
        const keeps = before.waiting && rec.state === 'in_progress' && rec.token === before.kept.record?.token;
        this.#sql.exec(
          `INSERT OR REPLACE INTO idempotency_records (${RECORD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
          id,
          rec.state,
          rec.fingerprint,
          rec.token,
          rec.body === undefined ? null : JSON.stringify(rec.body),
          rec.claimedAt,
          rec.expiresAt,
          rec.lockTtl ?? null,
          keeps ? 1 : 0,
        );
        earliest = rec.expiresAt;
      }
    }
    const steps = after?.steps;
    if (steps !== before.kept.steps) {
      if (steps === undefined) this.#sql.exec('DELETE FROM idempotency_steps WHERE id = ?', id);
      else {
        this.#sql.exec(
          'INSERT OR REPLACE INTO idempotency_steps (id, fingerprint, steps, expires_at) VALUES (?, ?, ?, ?)',
          id,
          steps.fingerprint,
          JSON.stringify(steps.steps),
          steps.expiresAt,
        );
        earliest = Math.min(earliest ?? steps.expiresAt, steps.expiresAt);
      }
    }
    return earliest;
  }

  /** Up to `limit` rows after `after`, in id order: the live ones of the state and name asked for are examined. */
  #list({ after, limit, state, name, olderThan }: ShardListInput, now: number): ShardListPage {
    const rows = this.#sql
      .exec(`SELECT ${RECORD_COLUMNS} FROM idempotency_records WHERE id > ? ORDER BY id LIMIT ?`, after, limit)
      .toArray();
    const records: RecordSummary[] = [];
    let examined = 0;
    for (const row of rows) {
      const id = row.id as string;
      const rec = live(recordOf(row), now);
      if (rec === undefined) continue;
      if (state !== undefined && rec.state !== state) continue;
      if (name !== undefined && nameOfRecordId(id) !== name) continue;
      examined++;
      if (claimedBefore(rec, olderThan, now)) records.push(summary(id, rec, () => row.waiting === 1));
    }
    const page: ShardListPage = { records, examined, read: rows.length, time: now };
    if (rows.length > 0) page.last = rows[rows.length - 1]!.id as string;
    return page;
  }
}

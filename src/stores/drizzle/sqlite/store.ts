import { is, sql } from 'drizzle-orm';
import { BaseSQLiteDatabase, type SQLiteSession } from 'drizzle-orm/sqlite-core';
import { IdempotencyConfigError, storeFailure } from '../../../core/idempotency-error.js';
import { currentRun } from '../../../core/protected-run.js';
import {
  acquiredAnswer,
  claimVerdict,
  completeVerdict,
  finishedAnswer,
  heldAnswer,
  lateAnswer,
  type StoredRecord,
  type StoredSteps,
} from '../../../core/protocol/record.js';
import type {
  ClaimInput,
  ClaimResult,
  CompleteInput,
  CompleteResult,
  ExtendInput,
  FencedInput,
  IdempotencyStore,
  SaveStepInput,
  SaveStepResult,
  StoreTransaction,
} from '../../../core/store.js';
import type { StoreAdmin } from '../../../core/store-admin.js';
import { sanitize } from '../driver-errors.js';
import { currentTransaction, type PurgeOptions, purgeInBatches, refusedStep } from '../shared.js';
import { decodeBody, encodeBody } from '../statements.js';
import { sqliteAdmin } from './admin.js';
import { isBusy, isSqliteOutage } from './driver-errors.js';
import {
  CLAIM_READ,
  CLAIM_TAKE,
  CLEAR_STEPS,
  COMPLETE,
  EXTEND,
  LIVE_STATE,
  lockTtlColumn,
  ms,
  PURGE,
  PURGE_STEPS,
  RELEASE,
  SAVE_STEP,
  STEP_STATE,
  STEPS,
  type Statement,
  textOrUndefined,
} from './statements.js';

export type AnySQLiteDatabase = BaseSQLiteDatabase<'sync' | 'async', any, any, any>;

/** The transaction type of a Drizzle SQLite database. */
export type SQLiteTransactionOf<TDb extends AnySQLiteDatabase> = Parameters<Parameters<TDb['transaction']>[0]>[0];

/** Rows deleted per statement (each batch one write transaction: small ones keep the write lock short), and batches. */
export type SQLitePurgeOptions = PurgeOptions;

export interface SQLiteDrizzleStore<TDb extends AnySQLiteDatabase> extends IdempotencyStore {
  readonly name: 'sqlite';
  /**
   * The transaction a procedure in transactional mode (`transaction: true`)
   * runs in, on libSQL: make your writes through it so they commit with the
   * stored outcome. Call it from the resolver (or anything it calls).
   * @throws if the call does not run in transactional mode.
   */
  transactionOf(ctx?: object): SQLiteTransactionOf<TDb>;
  /** Deletes expired rows, then expired steps, in batches, and returns how many went. Schedule it (see the docs). */
  purgeExpired(options?: SQLitePurgeOptions): Promise<number>;
  /** The operator API (see `idempotencyAdmin`). `waiting` is never known: the table does not track waiters. */
  readonly admin: StoreAdmin;
}

// A claim or a save whose fenced write found the row changed since its read
// (another process's claim, an expiry) reads again, this many times in all.
const ATTEMPTS = 5;

type PreparedQuery = {
  all(values: Record<string, unknown>): unknown;
  run(values: Record<string, unknown>): unknown;
};
interface Outcome {
  rows: Record<string, unknown>[];
  affected: number;
}

/** A row of idempotency_keys as the protocol's rules read it (record.ts). */
function recordOf(row: Record<string, unknown> | undefined): StoredRecord | undefined {
  if (row === undefined || row.state === null || row.state === undefined) return undefined;
  const body = textOrUndefined(row.body);
  return {
    state: String(row.state) as StoredRecord['state'],
    fingerprint: String(row.fingerprint),
    token: String(row.token ?? ''),
    body: body === undefined ? undefined : decodeBody(body),
    expiresAt: Number(row.expires_at),
    claimedAt: 0,
    lockTtl: undefined,
    meta: undefined,
  };
}

/** The steps a claim read, one row each in order (none: undefined). */
function stepsOf(rows: readonly Record<string, unknown>[]): StoredSteps | undefined {
  if (rows.length === 0) return undefined;
  return {
    fingerprint: String(rows[0]!.step_fingerprint),
    steps: rows.map((row) => ({ name: String(row.step_name), body: decodeBody(String(row.step_body)) })),
    expiresAt: Math.min(...rows.map((row) => Number(row.step_expires_at))),
  };
}

/**
 * Orders this process's transactions (libSQL's, each on a connection of its
 * own holding SQLite's write lock while the procedure runs) and the store's
 * other statements: a statement sent meanwhile on another connection would
 * wait for the lock synchronously, blocking the event loop the transaction
 * needs to finish (until busy_timeout, then SQLITE_BUSY). Statements run
 * together; a transaction runs alone, in arrival order.
 */
class Gate {
  private running = 0;
  private exclusive = false;
  private readonly queue: { exclusive: boolean; enter: () => void }[] = [];
  /** Whether a transaction was ever asked for: until then statements pass without queueing. */
  used = false;

  async run<T>(exclusive: boolean, fn: () => Promise<T>): Promise<T> {
    if (this.exclusive || this.queue.length > 0 || (exclusive && this.running > 0)) {
      await new Promise<void>((enter) => this.queue.push({ exclusive, enter }));
    } else {
      this.take(exclusive);
    }
    try {
      return await fn();
    } finally {
      this.running--;
      this.exclusive = false;
      this.next();
    }
  }

  private take(exclusive: boolean): void {
    this.running++;
    this.exclusive = exclusive;
  }

  private next(): void {
    while (this.queue.length > 0 && !this.exclusive) {
      const head = this.queue[0]!;
      if (head.exclusive && this.running > 0) return;
      this.queue.shift();
      this.take(head.exclusive);
      head.enter();
    }
  }
}

/**
 * The store on SQLite through Drizzle (`drizzleStore` given a SQLite database:
 * better-sqlite3, or libSQL on a file). Each transition is a read and a fenced
 * write, each one statement in autocommit: a first execution costs 4
 * statements (read, claim, the steps' read, completion), a replay or an
 * in-flight rejection 1. Time is the clock of the machine that runs the
 * statements (`julianday('now')`): every process on one file shares it. It
 * sets no pragma on your connection: see the docs for WAL and busy_timeout.
 */
export function sqliteDrizzleStore<TDb extends AnySQLiteDatabase>(db: TDb): SQLiteDrizzleStore<TDb> {
  // initialized config
  const sync = (db as unknown as { resultKind?: unknown }).resultKind === 'sync';
  const gate = new Gate();
  const openTransactions = new Set<unknown>();
  const preparedBySession = new WeakMap<object, Map<Statement<string>, PreparedQuery>>();
  const prepared = (executor: AnySQLiteDatabase, query: Statement<string>): PreparedQuery => {
    // Drizzle's SQLite database keeps its session in `session` (marked internal in its types).
    const session = (executor as unknown as { session: SQLiteSession<'sync' | 'async', unknown, any, any> }).session;
    let bySession = preparedBySession.get(session);
    if (bySession === undefined) preparedBySession.set(session, (bySession = new Map()));
    let found = bySession.get(query);
    if (found === undefined) {
      const params = query.params.map((name) => sql.placeholder(name));
      found = session.prepareQuery({ sql: query.text, params }, undefined, 'all', false) as unknown as PreparedQuery;
      bySession.set(query, found);
    }
    return found;
  };

  /** One statement on `executor`: its rows (`all`), or how many rows it changed (`run`). */
  const execute = async <K extends string>(
    executor: AnySQLiteDatabase,
    query: Statement<K>,
    values: Record<K, unknown>,
  ): Promise<Outcome> => {
    // Reads and writes with RETURNING give rows; other writes their count.
    const method = /^\s*select|returning/.test(query.text) ? 'all' : 'run';
    try {
      const result = await prepared(executor, query)[method](values);
      if (method === 'all') return { rows: result as Record<string, unknown>[], affected: 0 };
      // better-sqlite3: { changes }; libSQL: { rowsAffected }; Cloudflare D1: { meta: { changes } }.
      const { changes, rowsAffected, meta } = (result ?? {}) as {
        changes?: unknown;
        rowsAffected?: unknown;
        meta?: { changes?: unknown };
      };
      return { rows: [], affected: Number(changes ?? rowsAffected ?? meta?.changes ?? 0) };
    } catch (error) {
      const sanitized = sanitize(error, isSqliteOutage);
      // busy_timeout passed without the write lock: running it again would wait as long.
      if (isBusy(sanitized)) throw storeFailure('contention', sanitized);
      throw sanitized;
    }
  };
  /** A statement on the database, after this process's open transaction (see Gate). */
  const run = <K extends string>(query: Statement<K>, values: Record<K, unknown>) =>
    gate.used ? gate.run(false, () => execute(db, query, values)) : execute(db, query, values);
  const rows = async <K extends string>(query: Statement<K>, values: Record<K, unknown>) =>
    (await run(query, values)).rows;

  const complete = async (executor: AnySQLiteDatabase, input: CompleteInput): Promise<CompleteResult> => {
    const { id, state, fingerprint, token, body, ttl } = input;
    const values = { id, state, fingerprint, token, body: encodeBody(body), ttl: ms(ttl) };
    const inDb = executor === db;
    const one = <K extends string>(query: Statement<K>, v: Record<K, unknown>) =>
      inDb ? rows(query, v) : execute(executor, query, v).then((o) => o.rows);
    for (let attempt = 1; ; attempt++) {
      if ((await one(COMPLETE, values)).length > 0) {
        if (input.clearSteps === true) await one(CLEAR_STEPS, { id });
        return 'stored';
      }
      // Refused: say by what. The token's own outcome: a completion sent again, stored already and left as it is.
      const [row] = await one(LIVE_STATE, { id });
      const verdict = completeVerdict(recordOf(row), input, Number(row?.time));
      if (verdict !== 'write') return verdict;
      // The row that refused expired or went since: the completion is sent again; a key that keeps changing under it
      // is held (the engine tries a held completion again).
      if (attempt === ATTEMPTS) return 'held';
    }
  };

  // SQLite binds no boolean: 1 or 0.
  const admin = sqliteAdmin((query, values) =>
    run(
      query,
      Object.fromEntries(Object.entries(values).map(([k, v]) => [k, typeof v === 'boolean' ? Number(v) : v])) as never,
    ),
  );

  return {
    name: 'sqlite',
    admin,
    async claim(input: ClaimInput): Promise<ClaimResult> {
      const { id, fingerprint, token, lockTtl, deadline } = input;
      const write = {
        id,
        fingerprint,
        token,
        lockTtl: ms(lockTtl),
        lockTtlColumn: lockTtlColumn(lockTtl),
        deadline: deadline === undefined ? null : deadline,
      };
      for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
        const [first] = await rows(CLAIM_READ, { id, fingerprint });
        if (first === undefined) throw new Error('drizzleStore: the claim read returned no row.');
        const now = Number(first.time);
        const rec = recordOf(first);
        const verdict = claimVerdict(rec, input, now);
        if (verdict === 'held') return heldAnswer(rec!, {}, now);
        if (verdict === 'finished') return finishedAnswer(rec!, input);
        if (verdict === 'late') return lateAnswer(now);
        const [taken] = await rows(CLAIM_TAKE, write);
        // Only the holder writes steps: read after the take, they are the ones it resumes.
        if (taken !== undefined) return acquiredAnswer(stepsOf(await rows(STEPS, { id })), Number(taken.time));
      }
      throw storeFailure(
        'contention',
        new Error(`drizzleStore: the claim did not settle after ${ATTEMPTS} attempts under contention.`),
      );
    },

    complete: (input: CompleteInput) => complete(db, input),

    async release({ id, token }: FencedInput): Promise<boolean> {
      return (await rows(RELEASE, { id, token })).length > 0;
    },

    async saveStep({ id, token, fingerprint, index, name, body, ttl }: SaveStepInput): Promise<SaveStepResult> {
      if (openTransactions.has(currentRun.getStore()?.transaction)) {
        throw new IdempotencyConfigError(
          "step(): a procedure in transactional mode cannot record steps on SQLite: its transaction holds the database's only write lock, which the step's own write (outside the transaction, so that it outlives a rollback) would wait for forever. Use steps or `transaction: true`, not both.",
        );
      }
      const values = { id, token, index, name, fingerprint, body: encodeBody(body), ttl: ms(ttl) };
      for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
        if ((await rows(SAVE_STEP, values)).some((row) => Number(row.seq) === index)) return 'stored';
        const [row] = await rows(STEP_STATE, { id, token, index });
        const answer = refusedStep(Number(row?.held) === 1, Number(row?.n), textOrUndefined(row?.at_name), {
          index,
          name,
        });
        // None: the steps changed between the two statements (a concurrent save); read again.
        if (answer !== undefined) return answer;
      }
      throw storeFailure(
        'contention',
        new Error(`drizzleStore: the step did not settle after ${ATTEMPTS} attempts under contention.`),
      );
    },

    async extend({ id, token, lockTtl }: ExtendInput): Promise<boolean> {
      return (
        (await rows(EXTEND, { id, token, lockTtl: ms(lockTtl), lockTtlColumn: lockTtlColumn(lockTtl) })).length > 0
      );
    },

    transaction<T>(fn: (tx: StoreTransaction) => Promise<T>): Promise<T> {
      if (sync) {
        throw new IdempotencyConfigError(
          "drizzleStore: transactional mode needs an asynchronous SQLite driver (libSQL: drizzle(createClient({ url: 'file:...' }))). better-sqlite3's transactions are synchronous: the procedure, which awaits, cannot run inside one. Leave `transaction` off, and make the procedure's own writes safe to run again.",
        );
      }
      gate.used = true;
      return gate.run(true, async () =>
        db.transaction(async (tx) => {
          openTransactions.add(tx);
          try {
            return await fn({
              handle: tx,
              complete: (input) => complete(tx as unknown as AnySQLiteDatabase, input),
            });
          } finally {
            openTransactions.delete(tx);
          }
        }),
      ) as Promise<T>;
    },

    transactionOf: (_ctx?: object) => currentTransaction<SQLiteTransactionOf<TDb>>(),

    purgeExpired: (options?: SQLitePurgeOptions) =>
      purgeInBatches(
        [PURGE, PURGE_STEPS],
        async (purge, batchSize) => (await run(purge, { batchSize })).affected,
        options,
      ),
  };
}

/** Whether `db` is a Drizzle SQLite database (or transaction). */
export const isSQLiteDatabase = (db: unknown): db is AnySQLiteDatabase => is(db, BaseSQLiteDatabase);

import { sql } from 'drizzle-orm';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { IdempotencyConfigError, storeFailure } from '../../core/idempotency-error.js';
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
} from '../../core/store.js';
import type { StoreAdmin } from '../../core/store-admin.js';
import { drizzleAdmin } from './admin.js';
import { isConflict, isPreparedStatementMiss, sanitize } from './driver-errors.js';
import { type AnyMySqlDatabase, isMySqlDatabase, type MySqlDrizzleStore, mysqlDrizzleStore } from './mysql/store.js';
import { currentTransaction, type PurgeOptions, purgeInBatches } from './shared.js';
import {
  type AnySQLiteDatabase,
  isSQLiteDatabase,
  type SQLiteDrizzleStore,
  sqliteDrizzleStore,
} from './sqlite/store.js';
import {
  CLAIM,
  COMPLETE,
  COMPLETE_CLEARING_STEPS,
  decodeBody,
  EXTEND,
  encodeBody,
  LIVE_STATE,
  ms,
  PURGE,
  PURGE_STEPS,
  parseSteps,
  RELEASE,
  rowsOf,
  SAVE_STEP,
  type Statement,
} from './statements.js';

type AnyPgDatabase = PgDatabase<PgQueryResultHKT, any, any>;

/** The transaction type of a Drizzle database. */
export type TransactionOf<TDb extends AnyPgDatabase> = Parameters<Parameters<TDb['transaction']>[0]>[0];

export interface DrizzleStoreOptions<TDb extends AnyPgDatabase | AnyMySqlDatabase | AnySQLiteDatabase> {
  /**
   * Your Drizzle PostgreSQL database, on any driver (node-postgres,
   * postgres-js, PGlite...), or your MySQL/MariaDB database on mysql2 (a pool,
   * or one connection), or your SQLite database (better-sqlite3, or libSQL on
   * a file). The store runs its statements on it and never
   * closes it. The `idempotency_keys` table must exist (see the migrations).
   */
  db: TDb;
}

export type { PurgeOptions };

export interface DrizzleStore<TDb extends AnyPgDatabase> extends IdempotencyStore {
  readonly name: 'postgresql';
  /**
   * The transaction a procedure in transactional mode (`transaction: true`)
   * runs in: make your writes through it so they commit with the stored
   * outcome. Call it from the resolver (or anything it calls); `ctx` is
   * accepted for readability and not needed.
   * @throws if the call does not run in transactional mode.
   */
  transactionOf(ctx?: object): TransactionOf<TDb>;
  /** Deletes expired rows, then expired steps, in batches, and returns how many went. Schedule it (see the docs). */
  purgeExpired(options?: PurgeOptions): Promise<number>;
  /**
   * The operator API (see `idempotencyAdmin`): one statement per call, a
   * listing paged by id (the claims in progress through their partial index).
   * `waiting` is never known: the table does not track waiters.
   */
  readonly admin: StoreAdmin;
}

// A claim that is neither taken nor finds a row has met a race whose winner
// its snapshot cannot see (see CLAIM); it runs again this many times.
const SNAPSHOT_ATTEMPTS = 5;
// Serialization failures (REPEATABLE READ, SERIALIZABLE) are retried this many
// times, with a short jittered pause, before the key counts as contended.
const CONFLICT_ATTEMPTS = 10;

type PreparedQuery = { execute(values: Record<string, unknown>): Promise<unknown> };

/**
 * A store on your Drizzle database: PostgreSQL (see below), MySQL/MariaDB
 * (see mysql/store.ts) or SQLite (see sqlite/store.ts), told apart by the
 * database's Drizzle class.
 *
 * On PostgreSQL each transition is one statement, so a first execution costs
 * 2 round trips (claim, complete) and a replay or an in-flight rejection 1.
 * Time is the server's (`statement_timestamp()`). It can run an operation and
 * store its outcome in one transaction.
 */
export function drizzleStore<TDb extends AnyMySqlDatabase>(options: DrizzleStoreOptions<TDb>): MySqlDrizzleStore<TDb>;
export function drizzleStore<TDb extends AnySQLiteDatabase>(options: DrizzleStoreOptions<TDb>): SQLiteDrizzleStore<TDb>;
export function drizzleStore<TDb extends AnyPgDatabase>(options: DrizzleStoreOptions<TDb>): DrizzleStore<TDb>;
export function drizzleStore(
  options: DrizzleStoreOptions<AnyPgDatabase | AnyMySqlDatabase | AnySQLiteDatabase>,
): DrizzleStore<AnyPgDatabase> | MySqlDrizzleStore<AnyMySqlDatabase> | SQLiteDrizzleStore<AnySQLiteDatabase> {
  const db = options?.db;
  if (isMySqlDatabase(db)) return mysqlDrizzleStore(db);
  if (isSQLiteDatabase(db)) return sqliteDrizzleStore(db);
  return postgresStore(db as AnyPgDatabase);
}

function postgresStore<TDb extends AnyPgDatabase>(db: TDb): DrizzleStore<TDb> {
  // initialized config
  if (
    db === undefined ||
    db === null ||
    typeof (db as AnyPgDatabase).execute !== 'function' ||
    typeof (db as AnyPgDatabase).transaction !== 'function' ||
    typeof (db as AnyPgDatabase)._?.session?.prepareQuery !== 'function'
  ) {
    throw new IdempotencyConfigError(
      'drizzleStore: `db` must be a Drizzle PostgreSQL database (drizzle(pool), drizzle(pglite), ...), MySQL database (drizzle(mysql2Pool)) or SQLite database (drizzle(betterSqlite3), drizzle(libsqlClient)).',
    );
  }

  /**
   * Statements are Drizzle prepared queries, built once per session, so
   * Drizzle's logger and tracing still see each one. On `db` they are named,
   * so the server plans each once per connection; if it does not keep them (a
   * pooler in transaction mode), the store goes on unnamed. In a transaction
   * they stay unnamed: that failure there would abort the caller's transaction.
   */
  let named = true;
  let preparedBySession = new WeakMap<object, Map<Statement<string>, PreparedQuery>>();
  const prepared = (executor: AnyPgDatabase, query: Statement<string>): PreparedQuery => {
    const session = executor._.session;
    let bySession = preparedBySession.get(session);
    if (bySession === undefined) preparedBySession.set(session, (bySession = new Map()));
    let found = bySession.get(query);
    if (found === undefined) {
      const params = query.params.map((name) => sql.placeholder(name));
      const name = named && executor === db ? query.name : undefined;
      found = session.prepareQuery({ sql: query.text, params }, undefined, name, false) as PreparedQuery;
      bySession.set(query, found);
    }
    return found;
  };

  /** One statement on `executor`; outside a transaction, a serialization failure runs it again. */
  const run = async <K extends string>(
    executor: AnyPgDatabase,
    query: Statement<K>,
    values: Record<K, unknown>,
    retryConflicts = executor === db,
  ) => {
    for (let attempt = 1; ; attempt++) {
      const wasNamed = named && executor === db;
      try {
        return rowsOf(await prepared(executor, query).execute(values));
      } catch (error) {
        const sanitized = sanitize(error);
        if (wasNamed && isPreparedStatementMiss(sanitized)) {
          named = false;
          preparedBySession = new WeakMap();
          continue;
        }
        if (!isConflict(sanitized)) throw sanitized;
        // Inside a transaction the whole transaction failed: only its owner can run it again.
        if (!retryConflicts) throw sanitized;
        if (attempt >= CONFLICT_ATTEMPTS) throw storeFailure('contention', sanitized);
        await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(2 ** attempt, 50)));
      }
    }
  };

  const complete = async (executor: AnyPgDatabase, input: CompleteInput): Promise<CompleteResult> => {
    const { id, state, fingerprint, token, body, ttl } = input;
    const values = { id, state, fingerprint, token, body: encodeBody(body), ttl: ms(ttl) };
    const statement = input.clearSteps === true ? COMPLETE_CLEARING_STEPS : COMPLETE;
    for (let attempt = 1; ; attempt++) {
      if ((await run(executor, statement, values)).length === 1) return 'stored';
      // Refused (rare): say by what. The token's own outcome: a completion sent again, stored
      // already and left as it is.
      const [row] = await run(executor, LIVE_STATE, { id });
      if (row !== undefined) return row.state === 'in_progress' ? 'held' : row.token === token ? 'stored' : 'finished';
      // No live row: the one that refused expired since (the completion is sent again, once), or it is
      // another claim's, committed after that statement began and invisible here: held.
      if (attempt === 2) return 'held';
    }
  };

  const admin = drizzleAdmin((query, values) => run(db, query, values));

  return {
    name: 'postgresql',
    admin,
    async claim(input: ClaimInput): Promise<ClaimResult> {
      const { id, fingerprint, token, lockTtl, deadline } = input;
      const values = {
        id,
        fingerprint,
        token,
        lockTtl: ms(lockTtl),
        deadline: deadline === undefined ? 'infinity' : new Date(deadline).toISOString(),
      };
      for (let attempt = 0; attempt < SNAPSHOT_ATTEMPTS; attempt++) {
        const [row] = await run(db, CLAIM, values);
        if (row === undefined) throw new Error('drizzleStore: the claim statement returned no row.');
        const time = row.time === null || row.time === undefined ? undefined : Number(row.time);
        if (row.acquired === true) {
          return row.steps === null || row.steps === undefined
            ? { state: 'acquired', time: time! }
            : { state: 'acquired', time: time!, steps: parseSteps(row.steps) };
        }
        if (time !== undefined) {
          // The row was free for this claim, yet not taken: the deadline had passed, or the race above.
          if (input.deadline !== undefined && time > input.deadline) return { state: 'late', time };
          if (row.state === null || row.state === undefined) continue;
        }
        const fingerprint = String(row.fingerprint);
        if (row.state === 'in_progress') return { state: 'in_progress', time, fingerprint };
        const state = row.state as 'completed' | 'failed';
        return row.body === null || row.body === undefined
          ? { state, time, fingerprint }
          : { state, time, fingerprint, body: decodeBody(String(row.body)) };
      }
      throw storeFailure(
        'contention',
        new Error(`drizzleStore: the claim did not settle after ${SNAPSHOT_ATTEMPTS} attempts under contention.`),
      );
    },

    complete: (input: CompleteInput) => complete(db, input),

    async release({ id, token }: FencedInput): Promise<boolean> {
      return (await run(db, RELEASE, { id, token })).length === 1;
    },

    async saveStep({ id, token, fingerprint, index, name, body, ttl }: SaveStepInput): Promise<SaveStepResult> {
      const values = { id, token, index, name, fingerprint, body: encodeBody(body), ttl: ms(ttl) };
      const [row] = await run(db, SAVE_STEP, values);
      if (row === undefined) throw new Error('drizzleStore: the step statement returned no row.');
      if (row.held !== true) return 'fenced';
      if (row.saved === true || row.at_name === name) return 'stored';
      return 'conflict';
    },

    async extend({ id, token, lockTtl }: ExtendInput): Promise<boolean> {
      return (await run(db, EXTEND, { id, token, lockTtl: ms(lockTtl) })).length === 1;
    },

    transaction<T>(fn: (tx: StoreTransaction) => Promise<T>): Promise<T> {
      return db.transaction((tx) =>
        fn({
          handle: tx,
          complete: (input) => complete(tx as AnyPgDatabase, input),
        }),
      );
    },

    transactionOf: (_ctx?: object) => currentTransaction<TransactionOf<TDb>>(),

    purgeExpired: (options?: PurgeOptions) =>
      purgeInBatches(
        [PURGE, PURGE_STEPS],
        async (purge, batchSize) => Number((await run(db, purge, { batchSize }))[0]?.n ?? 0),
        options,
      ),
  };
}

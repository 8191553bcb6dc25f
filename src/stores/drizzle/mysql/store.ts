import { is, sql } from 'drizzle-orm';
import {
  MySqlDatabase,
  type MySqlQueryResultHKT,
  type MySqlSession,
  type PreparedQueryHKTBase,
} from 'drizzle-orm/mysql-core';
import { IdempotencyConfigError, storeFailure } from '../../../core/idempotency-error.js';
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
import { mysqlAdmin } from './admin.js';
import { isDeadlock, isDuplicateKey, isLockWaitTimeout, isMysqlOutage } from './driver-errors.js';
import { MAX_ID_BYTES } from './schema.js';
import {
  bytes,
  CLAIM_INSERT,
  CLAIM_READ,
  CLAIM_TAKE,
  CLEAR_STEPS,
  COMPLETE_INSERT,
  COMPLETE_UPDATE,
  EXTEND,
  HOLDS,
  LIVE_STATE,
  LIVE_STATE_LOCKING,
  lockTtlColumn,
  ms,
  PURGE,
  PURGE_STEPS,
  RELEASE,
  SAVE_STEP,
  STEP_STATE,
  type Statement,
  text,
  textOrUndefined,
} from './statements.js';

export type AnyMySqlDatabase = MySqlDatabase<MySqlQueryResultHKT, PreparedQueryHKTBase, any, any>;

/** The transaction type of a Drizzle MySQL database. */
export type MySqlTransactionOf<TDb extends AnyMySqlDatabase> = Parameters<Parameters<TDb['transaction']>[0]>[0];

export type MySqlPurgeOptions = PurgeOptions;

export interface MySqlDrizzleStore<TDb extends AnyMySqlDatabase> extends IdempotencyStore {
  readonly name: 'mysql';
  /**
   * The transaction a procedure in transactional mode (`transaction: true`)
   * runs in: make your writes through it so they commit with the stored
   * outcome. Call it from the resolver (or anything it calls).
   * @throws if the call does not run in transactional mode.
   */
  transactionOf(ctx?: object): MySqlTransactionOf<TDb>;
  /** Deletes expired rows, then expired steps, in batches, and returns how many went. Schedule it (see the docs). */
  purgeExpired(options?: MySqlPurgeOptions): Promise<number>;
  /** The operator API (see `idempotencyAdmin`). `waiting` is never known: the table does not track waiters. */
  readonly admin: StoreAdmin;
}

// A claim or a save whose fenced write found the row changed since its read
// (a concurrent claim, an expiry) reads again, this many times in all.
const ATTEMPTS = 5;
// Deadlocks are run again this many times, with a short jittered pause, before the key counts as contended.
const DEADLOCK_ATTEMPTS = 10;

type PreparedQuery = { execute(values: Record<string, unknown>): Promise<unknown> };
interface Outcome {
  rows: Record<string, unknown>[];
  affected: number;
}

/** What a driver answered: mysql2's [rows or ResultSetHeader, fields]; PlanetScale's { rows, rowsAffected }. */
function outcomeOf(result: unknown): Outcome {
  const first = Array.isArray(result) ? result[0] : result;
  if (Array.isArray(first)) return { rows: first as Record<string, unknown>[], affected: 0 };
  const { affectedRows, rowsAffected, rows } = (first ?? {}) as {
    affectedRows?: unknown;
    rowsAffected?: unknown;
    rows?: unknown;
  };
  return {
    rows: Array.isArray(rows) ? (rows as Record<string, unknown>[]) : [],
    affected: Number(affectedRows ?? rowsAffected ?? 0),
  };
}

/** A row of idempotency_keys as the protocol's rules read it (record.ts). */
function recordOf(row: Record<string, unknown> | undefined): StoredRecord | undefined {
  if (row === undefined || row.state === null || row.state === undefined) return undefined;
  return {
    state: String(row.state) as StoredRecord['state'],
    fingerprint: text(row.fingerprint),
    token: text(row.token ?? ''),
    body: textOrUndefined(row.body),
    expiresAt: Number(row.expires_at),
    claimedAt: 0,
    lockTtl: undefined,
    meta: undefined,
  };
}

/** The steps a claim read, one row each in order (none: undefined). */
function stepsOf(rows: readonly Record<string, unknown>[]): StoredSteps | undefined {
  const found = rows.filter((row) => row.seq !== null && row.seq !== undefined);
  if (found.length === 0) return undefined;
  return {
    fingerprint: text(found[0]!.step_fingerprint),
    steps: found.map((row) => ({ name: text(row.step_name), body: text(row.step_body) })),
    expiresAt: Math.min(...found.map((row) => Number(row.step_expires_at))),
  };
}

/** Whether `db` runs on one connection (mysql2's Connection): its transactions would take in every other query. */
const onOneConnection = (db: AnyMySqlDatabase): boolean => {
  const client = (db as { $client?: unknown }).$client;
  return typeof client === 'object' && client !== null && !('getConnection' in client) && 'beginTransaction' in client;
};

/**
 * The store on MySQL 8 or MariaDB 10.5+ through Drizzle (`drizzleStore`
 * given a MySQL database). Each transition is a read and a fenced write,
 * each one statement in autocommit (no transaction, so a single connection
 * serves concurrent calls): a first execution costs 3 round trips (read,
 * claim, complete), a replay or an in-flight rejection 1. Time is the
 * server's (`UTC_TIMESTAMP(3)`). It can run an operation and store its
 * outcome in one transaction, on a pool.
 */
export function mysqlDrizzleStore<TDb extends AnyMySqlDatabase>(db: TDb): MySqlDrizzleStore<TDb> {
  // initialized config
  const preparedBySession = new WeakMap<object, Map<Statement<string>, PreparedQuery>>();
  const prepared = (executor: AnyMySqlDatabase, query: Statement<string>): PreparedQuery => {
    // Drizzle's MySQL database keeps its session in `session` (marked internal in its types).
    const session = (executor as unknown as { session: MySqlSession }).session;
    let bySession = preparedBySession.get(session);
    if (bySession === undefined) preparedBySession.set(session, (bySession = new Map()));
    let found = bySession.get(query);
    if (found === undefined) {
      const params = query.params.map((name) => sql.placeholder(name));
      found = session.prepareQuery({ sql: query.text, params }, undefined) as unknown as PreparedQuery;
      bySession.set(query, found);
    }
    return found;
  };

  /** One statement on `executor`; outside a transaction, a deadlock runs it again. */
  const run = async <K extends string>(
    executor: AnyMySqlDatabase,
    query: Statement<K>,
    values: Record<K, unknown>,
  ): Promise<Outcome> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return outcomeOf(await prepared(executor, query).execute(values));
      } catch (error) {
        const sanitized = sanitize(error, isMysqlOutage);
        if (isLockWaitTimeout(sanitized)) throw storeFailure('contention', sanitized);
        if (!isDeadlock(sanitized)) throw sanitized;
        // Inside a transaction InnoDB rolled the whole transaction back: only its owner can run it again.
        if (executor !== db || attempt >= DEADLOCK_ATTEMPTS) throw storeFailure('contention', sanitized);
        await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(2 ** attempt, 50)));
      }
    }
  };
  /** An insert: whether it wrote, false when the key was there (a duplicate key). */
  const insert = async <K extends string>(
    executor: AnyMySqlDatabase,
    query: Statement<K>,
    values: Record<K, unknown>,
  ) => {
    try {
      return (await run(executor, query, values)).affected > 0;
    } catch (error) {
      if (error instanceof Error && isDuplicateKey(error)) return false;
      throw error;
    }
  };
  const idOf = (id: string): Buffer => {
    const encoded = bytes(id);
    if (encoded.length > MAX_ID_BYTES) {
      throw new IdempotencyConfigError(
        `drizzleStore: a record id of ${encoded.length} bytes does not fit the MySQL table's id (at most ${MAX_ID_BYTES} bytes): shorten the scope or the procedure path.`,
      );
    }
    return encoded;
  };

  const complete = async (executor: AnyMySqlDatabase, input: CompleteInput): Promise<CompleteResult> => {
    const { state, fingerprint, token, body, ttl } = input;
    const id = idOf(input.id);
    const values = { id, state, fingerprint: bytes(fingerprint), token: bytes(token), body: bytes(body), ttl: ms(ttl) };
    for (let attempt = 1; ; attempt++) {
      const stored =
        (await run(executor, COMPLETE_UPDATE, values)).affected > 0 ||
        (await insert(executor, COMPLETE_INSERT, values));
      if (stored) {
        if (input.clearSteps === true) await run(executor, CLEAR_STEPS, { id });
        return 'stored';
      }
      // Refused: say by what. The token's own outcome: a completion sent again, stored already and left as it is.
      const [row] = (await run(executor, executor === db ? LIVE_STATE : LIVE_STATE_LOCKING, { id })).rows;
      const verdict = completeVerdict(recordOf(row), input, Number(row?.time));
      if (verdict !== 'write') return verdict;
      // The row that refused expired or went since (a read in autocommit sees every commit): the completion is sent
      // again; a key that keeps changing under it is held (the engine tries a held completion again).
      if (attempt === ATTEMPTS) return 'held';
    }
  };

  const admin = mysqlAdmin((query, values) => run(db, query, values));

  return {
    name: 'mysql',
    admin,
    async claim(input: ClaimInput): Promise<ClaimResult> {
      const { fingerprint, token, lockTtl, deadline } = input;
      const id = idOf(input.id);
      const read = { id, token: bytes(token), fingerprint: bytes(fingerprint) };
      const write = {
        ...read,
        lockTtl: ms(lockTtl),
        lockTtlColumn: lockTtlColumn(lockTtl),
        deadline: deadline === undefined ? null : deadline,
      };
      let unchanged = false;
      for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
        const { rows } = await run(db, CLAIM_READ, read);
        const [first] = rows;
        if (first === undefined) throw new Error('drizzleStore: the claim read returned no row.');
        const now = Number(first.time);
        const rec = recordOf(first);
        const verdict = claimVerdict(rec, input, now);
        if (verdict === 'held') return heldAnswer(rec!, {}, now);
        if (verdict === 'finished') return finishedAnswer(rec!, input);
        if (verdict === 'late') return lateAnswer(now);
        // A renewal of its own claim that changed nothing (the same ms) found it again: it holds it.
        if (verdict === 'retake' && unchanged) return acquiredAnswer(stepsOf(rows), now);
        const steps = stepsOf(rows);
        const taken =
          rec === undefined
            ? await insert(db, CLAIM_INSERT, { ...write, now, steps: steps?.steps.length ?? 0 })
            : (await run(db, CLAIM_TAKE, { ...write, now })).affected > 0;
        if (taken) return acquiredAnswer(steps, now);
        unchanged = verdict === 'retake';
      }
      throw storeFailure(
        'contention',
        new Error(`drizzleStore: the claim did not settle after ${ATTEMPTS} attempts under contention.`),
      );
    },

    complete: (input: CompleteInput) => complete(db, input),

    async release({ id, token }: FencedInput): Promise<boolean> {
      return (await run(db, RELEASE, { id: idOf(id), token: bytes(token) })).affected > 0;
    },

    async saveStep({ id, token, fingerprint, index, name, body, ttl }: SaveStepInput): Promise<SaveStepResult> {
      const key = { id: idOf(id), token: bytes(token), index };
      const values = { ...key, name: bytes(name), fingerprint: bytes(fingerprint), body: bytes(body), ttl: ms(ttl) };
      for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
        if (await insert(db, SAVE_STEP, values)) return 'stored';
        const [row] = (await run(db, STEP_STATE, key)).rows;
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
      const key = { id: idOf(id), token: bytes(token) };
      const values = { ...key, lockTtl: ms(lockTtl), lockTtlColumn: lockTtlColumn(lockTtl) };
      if ((await run(db, EXTEND, values)).affected > 0) return true;
      // Without CLIENT_FOUND_ROWS, a renewal in the claim's own ms with the same lease changed nothing.
      return Number((await run(db, HOLDS, key)).rows[0]?.held) === 1;
    },

    transaction<T>(fn: (tx: StoreTransaction) => Promise<T>): Promise<T> {
      if (onOneConnection(db)) {
        throw new IdempotencyConfigError(
          "drizzleStore: transactional mode needs a pool (drizzle(mysql.createPool(...))): on a single connection the transaction would take in every other query sent meanwhile, other requests' claims included.",
        );
      }
      return db.transaction((tx) =>
        fn({
          handle: tx,
          complete: (input) => complete(tx as unknown as AnyMySqlDatabase, input),
        }),
      );
    },

    transactionOf: (_ctx?: object) => currentTransaction<MySqlTransactionOf<TDb>>(),

    purgeExpired: (options?: MySqlPurgeOptions) =>
      purgeInBatches(
        [PURGE, PURGE_STEPS],
        async (purge, batchSize) => (await run(db, purge, { batchSize })).affected,
        options,
      ),
  };
}

/** Whether `db` is a Drizzle MySQL database (or transaction). */
export const isMySqlDatabase = (db: unknown): db is AnyMySqlDatabase => is(db, MySqlDatabase);

import { sql } from 'drizzle-orm';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { currentRun } from '../core/claimed-run.js';
import { IdempotencyConfigError, storeFailure } from '../core/errors.js';
import { checkWholeNumber } from '../core/options.js';
import type {
  ClaimInput,
  ClaimResult,
  CompleteInput,
  CompleteResult,
  ExtendInput,
  FencedInput,
  IdempotencyStore,
  RecordedSteps,
  SaveStepInput,
  SaveStepResult,
  StoreTransaction,
} from '../core/store.js';

type AnyPgDatabase = PgDatabase<PgQueryResultHKT, any, any>;

/** The transaction type of a Drizzle database. */
export type TransactionOf<TDb extends AnyPgDatabase> = Parameters<Parameters<TDb['transaction']>[0]>[0];

export interface DrizzleStoreOptions<TDb extends AnyPgDatabase> {
  /**
   * Your Drizzle PostgreSQL database, on any driver (node-postgres,
   * postgres-js, PGlite...). The store runs its statements on it and never
   * closes it. The `idempotency_keys` table must exist (see the migrations).
   */
  db: TDb;
}

export interface PurgeOptions {
  /**
   * Rows deleted per statement: small batches keep locks and WAL bursts short.
   * @default 1_000
   */
  batchSize?: number;
  /**
   * Stop after this many batches (for a job with a time budget).
   * @default Infinity
   */
  maxBatches?: number;
}

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
}

function rowsOf(result: unknown): Record<string, unknown>[] {
  // node-postgres and PGlite return { rows }, postgres-js an array of rows.
  if (Array.isArray(result)) return result as Record<string, unknown>[];
  const rows = (result as { rows?: unknown } | null)?.rows;
  return Array.isArray(rows) ? (rows as Record<string, unknown>[]) : [];
}

/**
 * Drizzle's query errors quote the statement and its parameters, which hold
 * keys and bodies: keep the driver's own error (its message names the
 * problem, not the values) and drop the rest.
 */
function sanitize(error: unknown): Error {
  const quotesQuery = error instanceof Error && error.message.startsWith('Failed query:');
  const driverError =
    error instanceof Error && error.cause instanceof Error ? error.cause : quotesQuery ? undefined : error;
  if (driverError === undefined) return new Error('drizzleStore: a query failed (the driver gave no reason).');
  const message = driverError instanceof Error ? driverError.message : String(driverError);
  const sanitized = new Error(`drizzleStore: ${message}`, { cause: driverError });
  return isOutage(driverError) ? storeFailure('unavailable', sanitized) : sanitized;
}

/** SQLSTATE of a serialization failure or a deadlock: the statement can simply run again. */
function isConflict(error: Error): boolean {
  const code = (error.cause as { code?: unknown } | undefined)?.code;
  return code === '40001' || code === '40P01';
}

/**
 * The server cannot be reached or cannot serve now: connection errors
 * (SQLSTATE class 08, socket errors, the drivers' own), shutdowns and restarts
 * (57P01-57P03), too many connections (53300), and timeouts (a statement or
 * lock timeout: 57014, 55P03).
 */
function isOutage(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code === 'string') {
    if (code.startsWith('08') || /^(57P0[123]|53300|57014|55P03)$/.test(code)) return true;
    if (/^E[A-Z]+$/.test(code) || code.startsWith('CONNECT')) return true; // ECONNREFUSED, ECONNRESET...; postgres-js CONNECTION_*
  }
  return (
    typeof message === 'string' &&
    /connection|terminated|timeout exceeded when trying to connect|not queryable/i.test(message)
  );
}

/**
 * PostgreSQL `text` cannot hold NUL: a body with one is stored as \u0001 and
 * its UTF-8 in base64 (as is a body that starts with \u0001, so that reading
 * is never ambiguous). No JSON text does either, so the common case costs a scan.
 */
const encodeBody = (body: string): string =>
  body.charCodeAt(0) === 1 || body.includes('\u0000') ? `\u0001${Buffer.from(body).toString('base64')}` : body;
const decodeBody = (stored: string): string =>
  stored.charCodeAt(0) === 1 ? Buffer.from(stored.slice(1), 'base64').toString() : stored;

/** The steps a claim read, from the JSON text of [name, body, fingerprint] arrays (see CLAIM). */
function parseSteps(text: unknown): RecordedSteps {
  const rows = JSON.parse(String(text)) as [string, string, string][];
  return {
    fingerprint: rows[0]?.[2] ?? '',
    steps: rows.map(([name, body]) => ({ name, body: decodeBody(body) })),
  };
}

/** Milliseconds as a parameter: whole, as the statements multiply it by `interval '1 millisecond'`. */
const ms = (value: number): number => Math.ceil(value);

// A claim that is neither taken nor finds a row has met a race whose winner
// its snapshot cannot see (see CLAIM); it runs again this many times.
const SNAPSHOT_ATTEMPTS = 5;
// Serialization failures (REPEATABLE READ, SERIALIZABLE) are retried this many
// times, with a short jittered pause, before the key counts as contended.
const CONFLICT_ATTEMPTS = 10;

/**
 * One of the store's statements: its text is fixed, so it is built once and
 * prepared once per Drizzle session (see `prepared` in drizzleStore); a call
 * only passes the values, by name, in the order of `params` ($1, $2...).
 */
interface Statement<K extends string> {
  /**
   * The name of the server-side prepared statement, unique to this text;
   * undefined for a statement parsed and planned at each call.
   */
  readonly name: string | undefined;
  readonly text: string;
  readonly params: readonly K[];
}

function statement<const K extends string>(params: readonly K[], text: string, named = true): Statement<K> {
  // FNV-1a of the text: a changed statement never reuses the name of another on a connection.
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return { name: named ? `trpc_idempotency_${(hash >>> 0).toString(36)}` : undefined, text, params };
}

/**
 * The claim, in one statement. `live` reads the key's live row (not expired)
 * in the statement's snapshot. `claimed` inserts the claim, or takes over a
 * row that has expired (or is this token's own live claim), unless the
 * deadline has passed; it does not even try when `live` shows a row it could
 * not take (another token's claim, or an outcome), so a replay or an
 * in-flight rejection writes nothing: no row lock, no WAL, no commit to wait
 * for. The result, in one row: whether it was taken, the live row, and, when
 * the row was free to take, the server's clock. In READ COMMITTED the read
 * sees the statement's snapshot, so when a concurrent claim committed after
 * it began (the INSERT waited for it and found it live) the row is invisible
 * and nothing is found: the caller then runs it again.
 *
 * A claim that takes the row also reads the steps recorded under its id
 * (`idempotency_steps`), as a JSON array of [name, body, fingerprint], in order.
 *
 * $1 id, $2 fingerprint, $3 token, $4 lockTtl (ms),
 * $5 deadline (timestamptz text: ISO 8601, or 'infinity' for none).
 */
const CLAIM = statement(
  ['id', 'fingerprint', 'token', 'lockTtl', 'deadline'],
  `
    with live as (
      select state, fingerprint, token, body from idempotency_keys
       where id = $1 and expires_at > statement_timestamp()
    ), claimed as (
      insert into idempotency_keys as k (id, state, fingerprint, token, body, expires_at, created_at)
      select $1, 'in_progress', $2, $3, null, statement_timestamp() + ($4::float8 * interval '1 millisecond'), statement_timestamp()
       where statement_timestamp() <= $5::timestamptz
         and not exists (select from live where not (live.token = $3 and live.state = 'in_progress'))
      on conflict (id) do update
        set state = 'in_progress', fingerprint = excluded.fingerprint, token = excluded.token, body = null,
            expires_at = excluded.expires_at, created_at = excluded.created_at
        where k.expires_at <= statement_timestamp() or (k.token = excluded.token and k.state = 'in_progress')
      returning 1
    )
    select exists (select from claimed) as acquired, live.state, live.fingerprint,
           case when live.fingerprint = $2 then live.body end as body,
           case when live.state is null or (live.token = $3 and live.state = 'in_progress')
                then date_part('epoch', statement_timestamp()) * 1000 end as time,
           case when exists (select from claimed) then (
             select json_agg(json_build_array(s.name, s.body, s.fingerprint) order by s.seq)::text
               from idempotency_steps s where s.id = $1 and s.expires_at > statement_timestamp()
           ) end as steps
      from (values (1)) as one (x) left join live on true`,
);

/**
 * Stores the outcome if the token holds the claim, or if the row is absent
 * or expired (purged, or expired with no one taking it over): no one else
 * holds or ran it. Another live claim or outcome wins. The token stays on
 * the row, so a completion sent twice by the same holder succeeds again.
 *
 * $1 id, $2 state ('completed' | 'failed'), $3 fingerprint, $4 token,
 * $5 body (encoded, see encodeBody), $6 ttl (ms).
 */
const COMPLETE = statement(
  ['id', 'state', 'fingerprint', 'token', 'body', 'ttl'],
  `
    insert into idempotency_keys as k (id, state, fingerprint, token, body, expires_at, created_at)
    values ($1, $2, $3, $4, $5, statement_timestamp() + ($6::float8 * interval '1 millisecond'), statement_timestamp())
    on conflict (id) do update
      set state = excluded.state, fingerprint = excluded.fingerprint, token = excluded.token, body = excluded.body,
          expires_at = excluded.expires_at
      where k.token = $4 or k.expires_at <= statement_timestamp()
    returning 1`,
);

/** As COMPLETE, and once stored, deletes the operation's recorded steps (CompleteInput.clearSteps). */
const COMPLETE_CLEARING_STEPS = statement(
  ['id', 'state', 'fingerprint', 'token', 'body', 'ttl'],
  `
    with done as (${COMPLETE.text}
    ), cleared as (
      delete from idempotency_steps where id = $1 and exists (select from done)
    )
    select 1 from done`,
);

/**
 * Records step $3 of the token's live claim, if the live steps recorded under
 * the id end right before it, and keeps every earlier step as long as this
 * one. The result: whether the token holds the claim, whether the step was
 * stored, and the name already recorded at $3, if any (a save sent twice).
 *
 * $1 id, $2 token, $3 index, $4 name, $5 fingerprint, $6 body (encoded), $7 ttl (ms).
 */
const SAVE_STEP = statement(
  ['id', 'token', 'index', 'name', 'fingerprint', 'body', 'ttl'],
  `
    with holder as (
      select from idempotency_keys
       where id = $1 and token = $2 and state = 'in_progress' and expires_at > statement_timestamp()
    ), recorded as (
      select count(*)::int as n,
             max(name) filter (where seq = $3::int) as at_name
        from idempotency_steps where id = $1 and expires_at > statement_timestamp()
    ), saved as (
      insert into idempotency_steps as s (id, seq, name, fingerprint, body, expires_at)
      select $1, $3::int, $4, $5, $6, statement_timestamp() + ($7::float8 * interval '1 millisecond')
       where exists (select from holder) and (select n from recorded) = $3::int
      on conflict (id, seq) do update
        set name = excluded.name, fingerprint = excluded.fingerprint, body = excluded.body,
            expires_at = excluded.expires_at
        where s.expires_at <= statement_timestamp()
      returning 1
    ), kept as (
      update idempotency_steps set expires_at = statement_timestamp() + ($7::float8 * interval '1 millisecond')
       where id = $1 and seq < $3::int and exists (select from saved)
    )
    select exists (select from holder) as held, exists (select from saved) as saved,
           (select at_name from recorded) as at_name`,
);

/** The state of a live row, after a refused completion. $1 id. */
const LIVE_STATE = statement(
  ['id'],
  `
    select state from idempotency_keys where id = $1 and expires_at > statement_timestamp()`,
);

/** Deletes the token's live claim. $1 id, $2 token. */
const RELEASE = statement(
  ['id', 'token'],
  `
    delete from idempotency_keys
     where id = $1 and token = $2 and state = 'in_progress' and expires_at > statement_timestamp()
    returning 1`,
);

/** Renews the token's live claim. $1 id, $2 token, $3 lockTtl (ms). */
const EXTEND = statement(
  ['id', 'token', 'lockTtl'],
  `
    update idempotency_keys set expires_at = statement_timestamp() + ($3::float8 * interval '1 millisecond')
     where id = $1 and token = $2 and state = 'in_progress' and expires_at > statement_timestamp()
    returning 1`,
);

/**
 * Deletes up to $1 expired rows. SKIP LOCKED: never wait for, nor block, a
 * row someone is working on. $1 batch size. Not named: it runs seldom, and
 * planned with its batch size it keeps to the index on expires_at.
 */
const purge = (table: string, key: string) =>
  statement(
    ['batchSize'],
    `
    with gone as (
      delete from ${table}
       where (${key}) in (select ${key} from ${table}
                     where expires_at <= statement_timestamp()
                     order by expires_at limit $1
                     for update skip locked)
      returning 1)
    select count(*)::int as n from gone`,
    false,
  );
const PURGE = purge('idempotency_keys', 'id');
/** Deletes up to $1 expired steps (see drizzle-schema.ts), as PURGE does rows. */
const PURGE_STEPS = purge('idempotency_steps', 'id, seq');

/**
 * SQLSTATE of a named prepared statement the server does not have (26000),
 * or has already (42P05): a connection pooler in transaction mode (PgBouncer
 * before 1.21...) moved the session's statements. Both fail before the
 * statement runs, so it can run again, unnamed.
 */
function isPreparedStatementMiss(error: Error): boolean {
  const code = (error.cause as { code?: unknown } | undefined)?.code;
  return code === '26000' || code === '42P05';
}

type PreparedQuery = { execute(values: Record<string, unknown>): Promise<unknown> };

/**
 * A store on PostgreSQL through Drizzle. Each transition is one statement,
 * so a first execution costs 2 round trips (claim, complete) and a replay or
 * an in-flight rejection 1. Time is the server's (`statement_timestamp()`).
 * It can run an operation and store its outcome in one transaction.
 */
export function drizzleStore<TDb extends AnyPgDatabase>(options: DrizzleStoreOptions<TDb>): DrizzleStore<TDb> {
  // initialized config
  const { db } = options;
  if (
    db === undefined ||
    db === null ||
    typeof (db as AnyPgDatabase).execute !== 'function' ||
    typeof (db as AnyPgDatabase).transaction !== 'function' ||
    typeof (db as AnyPgDatabase)._?.session?.prepareQuery !== 'function'
  ) {
    throw new IdempotencyConfigError(
      'drizzleStore: `db` must be a Drizzle PostgreSQL database (drizzle(pool), drizzle(pglite), ...).',
    );
  }

  /**
   * The statements are prepared with Drizzle's own prepared queries (as a
   * query builder's `.prepare(name)` is): built once per session, so a call
   * neither builds nor compiles SQL, and Drizzle's logger and tracing still
   * see every statement. On `db` they are named: node-postgres then parses
   * and plans each once per connection, not once per call (postgres-js
   * prepares them unless its `prepare` option is off; PGlite ignores the
   * name). If the server turns out not to keep them (a pooler in transaction
   * mode), the store goes on unnamed. In a transaction they stay unnamed, as
   * such a failure there would abort the caller's transaction.
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
    if ((await run(executor, statement, values)).length === 1) return 'stored';
    // Refused (rare): say by what. A row committed after that statement began may be
    // invisible here; it can only be another claim's, so no row reads as held.
    const [row] = await run(executor, LIVE_STATE, { id });
    return row === undefined || row.state === 'in_progress' ? 'held' : 'finished';
  };

  return {
    name: 'postgresql',
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

    transactionOf(_ctx?: object): TransactionOf<TDb> {
      const tx = currentRun.getStore()?.transaction;
      if (tx === undefined) {
        throw new IdempotencyConfigError(
          'transactionOf(ctx): this call does not run in transactional mode. Set `transaction: true` in the procedure meta (idempotency) or the options.',
        );
      }
      return tx as TransactionOf<TDb>;
    },

    async purgeExpired({
      batchSize = 1_000,
      maxBatches = Number.POSITIVE_INFINITY,
    }: PurgeOptions = {}): Promise<number> {
      checkWholeNumber(batchSize, 'batchSize', 'purgeExpired', { min: 1 });
      let total = 0;
      for (const purge of [PURGE, PURGE_STEPS]) {
        for (let batch = 0; batch < maxBatches; batch++) {
          const [row] = await run(db, purge, { batchSize });
          const n = Number(row?.n ?? 0);
          total += n;
          if (n < batchSize) break;
        }
      }
      return total;
    },
  };
}

// The SQLite store's SQL: each statement, its parameters by name, and how
// values cross it. Each statement runs alone, in autocommit: SQLite runs one
// writer at a time on a database file, so a statement is atomic against every
// other connection and process. A transition is a read (what is there, and the
// clock) and a fenced write (an upsert whose WHERE checks again what the read
// found), whose RETURNING says whether it wrote. Written for SQLite 3.35+
// (RETURNING); better-sqlite3 12 bundles 3.5x, @libsql/client 3.45.
import { type Statement, statement } from '../positional.js';

export { type Statement, statement };

/**
 * The clock of the machine that runs the statement, in whole ms since the epoch. SQLite keeps 'now' for the whole of
 * a statement's step, so every use in one write is one time. julianday('now') holds ms exactly (round: the double
 * is off by far less than a ms).
 */
export const NOW = "cast(round((julianday('now') - 2440587.5) * 86400000) as integer)";
/** The token's live claim, as a condition on a row of idempotency_keys. */
const HELD = `token = :token and state = 'in_progress' and expires_at > ${NOW}`;

/** Milliseconds as a parameter: whole, and small enough that now + ms stays an exact integer (Infinity: 100 years). */
const MAX_MS = 100 * 365.25 * 24 * 3600 * 1000;
export const ms = (value: number): number => Math.min(Math.ceil(value), MAX_MS);
/** The lease as `lock_ttl` keeps it: null when it does not fit a 32-bit integer, as on the other stores. */
export const lockTtlColumn = (value: number): number | null =>
  Math.ceil(value) <= 2_147_483_647 ? Math.ceil(value) : null;

/** A column's value: null or absent kept as undefined. */
export const textOrUndefined = (value: unknown): string | undefined =>
  value === null || value === undefined ? undefined : String(value);

/**
 * The claim's read: the clock, and the key's row if any, its outcome when the
 * fingerprint matches. A plain read: it sees the latest commit (in WAL mode,
 * without waiting for a writer).
 */
export const CLAIM_READ = statement(
  ['id', 'fingerprint'],
  `
    select ${NOW} as time, k.expires_at, k.state, k.token, k.fingerprint,
           case when k.fingerprint = :fingerprint and k.state <> 'in_progress' then k.body end as body
      from (select 1) as one left join idempotency_keys k on k.id = :id`,
);

/**
 * Takes the key for the token if it is absent or expired, or renews this
 * token's own claim (sent again), unless the deadline has passed: a row that
 * another claim took since the read is left alone, and nothing is returned.
 * A taken row gets the claim's time and fingerprint; a renewal keeps them.
 * In SQLite every assignment reads the row as it was. Returns the time.
 */
export const CLAIM_TAKE = statement(
  ['id', 'fingerprint', 'token', 'lockTtl', 'lockTtlColumn', 'deadline'],
  `
    insert into idempotency_keys as k (id, state, fingerprint, token, body, expires_at, created_at, lock_ttl)
    select :id, 'in_progress', :fingerprint, :token, null, ${NOW} + :lockTtl, ${NOW}, :lockTtlColumn
     where :deadline is null or ${NOW} <= :deadline
    on conflict (id) do update
       set state = 'in_progress', token = excluded.token, body = null, lock_ttl = excluded.lock_ttl,
           fingerprint = case when k.expires_at <= ${NOW} then excluded.fingerprint else k.fingerprint end,
           created_at = case when k.expires_at <= ${NOW} then excluded.created_at else k.created_at end,
           expires_at = excluded.expires_at
     where k.expires_at <= ${NOW} or (k.token = excluded.token and k.state = 'in_progress')
    returning ${NOW} as time`,
);

/** The live steps under the id, in order: what a claim that took the key resumes. */
export const STEPS = statement(
  ['id'],
  `select seq, name as step_name, body as step_body, fingerprint as step_fingerprint, expires_at as step_expires_at
     from idempotency_steps where id = :id and expires_at > ${NOW} order by seq`,
);

/**
 * Stores the outcome over the token's claim, or over an expired or absent
 * row (no one else holds or ran it). The claim's time stays when the token's
 * live claim is finished; a row taken from another (expired) gets the
 * completion's. Returns a row when it stored.
 */
export const COMPLETE = statement(
  ['id', 'state', 'fingerprint', 'token', 'body', 'ttl'],
  `
    insert into idempotency_keys as k (id, state, fingerprint, token, body, expires_at, created_at, lock_ttl)
    values (:id, :state, :fingerprint, :token, :body, ${NOW} + :ttl, ${NOW}, null)
    on conflict (id) do update
       set created_at = case when k.token = excluded.token and k.state = 'in_progress' and k.expires_at > ${NOW}
                             then k.created_at else excluded.created_at end,
           state = excluded.state, fingerprint = excluded.fingerprint, token = excluded.token, body = excluded.body,
           expires_at = excluded.expires_at, lock_ttl = null
     where (k.token = excluded.token and k.state = 'in_progress') or k.expires_at <= ${NOW}
    returning 1 as stored`,
);

/** Deletes the steps under the id: the completion that stored the outcome clears them. */
export const CLEAR_STEPS = statement(['id'], 'delete from idempotency_steps where id = :id');

/** The live row's state and token, and the clock, after a refused completion. */
export const LIVE_STATE = statement(
  ['id'],
  `select ${NOW} as time, state, token, fingerprint, expires_at
     from idempotency_keys where id = :id and expires_at > ${NOW}`,
);

/** Whether the token holds the live claim, and how many live steps the id has: a save's two conditions. */
const SAVE_CONDITIONS = `exists (select 1 from idempotency_keys where id = :id and ${HELD})
       and (select count(*) from idempotency_steps where id = :id and expires_at > ${NOW}) = :index`;

/**
 * Records step :index of the token's live claim if the live steps under the
 * id end right before it, and keeps every earlier step as long as this one,
 * in one statement: the earlier live steps are written again, and the
 * conflict turns that into a renewal of their expiry (and the steps'
 * fingerprint becomes the saver's). An expired row at :index is written over.
 * SQLite reads the whole SELECT before it writes. Returns the rows written: the
 * step was saved when :index is among them.
 */
export const SAVE_STEP = statement(
  ['id', 'token', 'index', 'name', 'fingerprint', 'body', 'ttl'],
  `
    insert into idempotency_steps (id, seq, name, fingerprint, body, expires_at)
    select :id, :index, :name, :fingerprint, :body, ${NOW} + :ttl
     where ${SAVE_CONDITIONS}
    union all
    select id, seq, name, :fingerprint, body, ${NOW} + :ttl from idempotency_steps
     where id = :id and seq < :index and expires_at > ${NOW}
       and ${SAVE_CONDITIONS}
    on conflict (id, seq) do update
       set name = excluded.name, fingerprint = excluded.fingerprint, body = excluded.body,
           expires_at = excluded.expires_at
    returning seq`,
);

/** After a save that wrote nothing: whether the token holds the claim, how many live steps, the name at :index. */
export const STEP_STATE = statement(
  ['id', 'token', 'index'],
  `
    select exists (select 1 from idempotency_keys where id = :id and ${HELD}) as held,
           (select count(*) from idempotency_steps where id = :id and expires_at > ${NOW}) as n,
           (select name from idempotency_steps where id = :id and seq = :index and expires_at > ${NOW}) as at_name`,
);

/** Deletes the token's live claim. */
export const RELEASE = statement(
  ['id', 'token'],
  `delete from idempotency_keys where id = :id and ${HELD} returning 1 as done`,
);

/** Renews the token's live claim, and records its new lease. */
export const EXTEND = statement(
  ['id', 'token', 'lockTtl', 'lockTtlColumn'],
  `update idempotency_keys set lock_ttl = :lockTtlColumn, expires_at = ${NOW} + :lockTtl
    where id = :id and ${HELD} returning 1 as done`,
);

/**
 * Deletes up to :batchSize expired rows, oldest first, through the index on
 * expires_at. Each batch is one write transaction: small batches keep the
 * single write lock short.
 */
const purge = (table: string) =>
  statement(
    ['batchSize'],
    `delete from ${table} where rowid in
       (select rowid from ${table} where expires_at <= ${NOW} order by expires_at limit :batchSize)`,
  );
export const PURGE = purge('idempotency_keys');
export const PURGE_STEPS = purge('idempotency_steps');

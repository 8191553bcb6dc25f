// The MySQL/MariaDB store's SQL: each statement, its parameters by name, and
// how values cross it. MySQL 8 has no RETURNING and MariaDB none on UPDATE, so
// a transition is a read (what is there, and the server's clock) and a fenced
// write that re-checks in its WHERE what the read found: its affected-row count
// says whether it wrote. Written for MariaDB 10.5+ and MySQL 8 alike.

import { type Statement, statement } from '../positional.js';

export { type Statement, statement };

/** The server's clock, once per statement (MySQL and MariaDB evaluate it at the statement's start), in UTC. */
const NOW = 'utc_timestamp(3)';
/** A DATETIME(3) in whole ms since the epoch. */
export const msOf = (value: string): string => `(timestampdiff(microsecond, '1970-01-01 00:00:00', ${value}) div 1000)`;
/** The server's clock `param` ms from now. */
const later = (param: string): string => `(${NOW} + interval (${param} * 1000) microsecond)`;
/** The time :now (ms since the epoch, the server's clock as a read gave it) as a DATETIME(3), whatever the session's time zone. */
const AT = "timestampadd(microsecond, :now * 1000, '1970-01-01 00:00:00')";
/** Whether the claim's deadline (ms, null for none) has not passed. */
const BEFORE_DEADLINE = `(:deadline is null or ${msOf(NOW)} <= :deadline)`;
/** The token's live claim, as a condition on a row of idempotency_keys. */
const HELD = `token = :token and state = 'in_progress' and expires_at > ${NOW}`;

/**
 * The longest lifetime a statement adds to the clock: DATETIME ends at year
 * 9999, so a longer ttl (Infinity) is cut to 100 years.
 */
const MAX_MS = 100 * 365.25 * 24 * 3600 * 1000;
/** Milliseconds as a parameter: whole, and within what a DATETIME can hold. */
export const ms = (value: number): number => Math.min(Math.ceil(value), MAX_MS);
/** The lease as `lock_ttl` (an INT) keeps it: null when it does not fit. */
export const lockTtlColumn = (value: number): number | null =>
  Math.ceil(value) <= 2_147_483_647 ? Math.ceil(value) : null;

/** A string as the binary columns hold it: its UTF-8. */
export const bytes = (value: string): Buffer => Buffer.from(value, 'utf8');
/** A binary column's value as a string (mysql2 gives BLOB and VARBINARY as Buffers). */
export const text = (value: unknown): string => (Buffer.isBuffer(value) ? value.toString('utf8') : String(value));
/** A binary column's value, null or absent kept as undefined. */
export const textOrUndefined = (value: unknown): string | undefined =>
  value === null || value === undefined ? undefined : text(value);

/**
 * The claim's read: the server's clock (ms), the key's row if any (`live`:
 * not expired), its outcome when the fingerprint matches, and, one row each
 * in order, the live steps under the id, only when the row is free for this
 * claim (absent, expired, or this token's own claim): a waiter polling a held
 * key reads no step. A plain read: in autocommit it sees the latest commit.
 */
export const CLAIM_READ = statement(
  ['id', 'token', 'fingerprint'],
  `
    select ${msOf(NOW)} as time, ${msOf('k.expires_at')} as expires_at,
           k.state, k.token, k.fingerprint,
           case when k.fingerprint = :fingerprint and k.state <> 'in_progress' and k.expires_at > ${NOW}
                then k.body end as body,
           s.seq, s.name as step_name, s.body as step_body, s.fingerprint as step_fingerprint,
           ${msOf('s.expires_at')} as step_expires_at
      from (select 1 as one) as one
      left join idempotency_keys k on k.id = :id
      left join idempotency_steps s on s.id = :id and s.expires_at > ${NOW}
            and (k.id is null or k.expires_at <= ${NOW} or (k.token = :token and k.state = 'in_progress'))
     order by s.seq`,
);

/**
 * Takes an absent key for the token, unless the deadline has passed (then it
 * inserts nothing). A duplicate key error: another claim took it first. The
 * claim is taken at :now, the time of the read that found the key free (the
 * claim's answer gives it, and no write can give a time back): its lease runs
 * from then. Nor does it insert when the live steps under the id are no longer
 * the :steps the read found: another claim took the key, recorded a step and
 * gave the key back between the two statements, and the claim would start
 * without that step and run it again. Only a holder appends steps, so their
 * number tells; the caller reads again.
 */
export const CLAIM_INSERT = statement(
  ['id', 'fingerprint', 'token', 'now', 'lockTtl', 'lockTtlColumn', 'deadline', 'steps'],
  `
    insert into idempotency_keys (id, state, fingerprint, token, body, expires_at, created_at, lock_ttl)
    select :id, 'in_progress', :fingerprint, :token, null, ${AT} + interval (:lockTtl * 1000) microsecond, ${AT},
           :lockTtlColumn
      from dual
     where ${BEFORE_DEADLINE}
       and (select count(*) from idempotency_steps where id = :id and expires_at > ${NOW}) = :steps`,
);

/**
 * Takes a row that had expired at :now, or renews this token's own claim
 * (sent again), unless the deadline has passed: everything as of :now, the
 * read's time (see CLAIM_INSERT), so that a claim sent again whose lease ends
 * between the read and this write is still a renewal, as the read decided.
 * A row someone took since the read has a later expiry, and is left alone. MySQL assigns left to right, each
 * assignment seeing the ones before it: the assignments that read the old
 * row (created_at, fingerprint) come before those that change what they read.
 * A renewal that changes nothing (the same ms, the same lease) counts 0 rows
 * without CLIENT_FOUND_ROWS: the caller reads again and finds its own claim.
 */
export const CLAIM_TAKE = statement(
  ['id', 'fingerprint', 'token', 'now', 'lockTtl', 'lockTtlColumn', 'deadline'],
  `
    update idempotency_keys
       set created_at = if(expires_at <= ${AT}, ${AT}, created_at),
           fingerprint = if(expires_at <= ${AT}, :fingerprint, fingerprint),
           state = 'in_progress', token = :token, body = null, lock_ttl = :lockTtlColumn,
           expires_at = ${AT} + interval (:lockTtl * 1000) microsecond
     where id = :id and (expires_at <= ${AT} or (token = :token and state = 'in_progress')) and ${BEFORE_DEADLINE}`,
);

/**
 * Stores the outcome over the token's claim, or over an expired row (no one
 * else holds or ran it). It always changes the row it matches (the state
 * leaves in_progress, or the expiry moves from the past). The claim's time
 * stays when the token's live claim is finished; a row taken from another
 * (expired) gets the completion's.
 */
export const COMPLETE_UPDATE = statement(
  ['id', 'state', 'fingerprint', 'token', 'body', 'ttl'],
  `
    update idempotency_keys
       set created_at = if(${HELD}, created_at, ${NOW}),
           state = :state, fingerprint = :fingerprint, token = :token, body = :body, lock_ttl = null,
           expires_at = ${later(':ttl')}
     where id = :id and ((token = :token and state = 'in_progress') or expires_at <= ${NOW})`,
);

/** Stores the outcome of a key with no row (purged, forgotten, or released by a newer holder). */
export const COMPLETE_INSERT = statement(
  ['id', 'state', 'fingerprint', 'token', 'body', 'ttl'],
  `
    insert into idempotency_keys (id, state, fingerprint, token, body, expires_at, created_at, lock_ttl)
    values (:id, :state, :fingerprint, :token, :body, ${later(':ttl')}, ${NOW}, null)`,
);

/** Deletes the steps under the id: the completion that stored the outcome clears them. */
export const CLEAR_STEPS = statement(['id'], 'delete from idempotency_steps where id = :id');

/** The live row's state and token, and the clock, after a refused completion. */
const liveState = (lock: string) =>
  statement(
    ['id'],
    `
    select ${msOf(NOW)} as time, state, token, ${msOf('expires_at')} as expires_at
      from idempotency_keys where id = :id and expires_at > ${NOW}${lock}`,
  );
export const LIVE_STATE = liveState('');
/** In a transaction (REPEATABLE READ's reads see its snapshot): a locking read sees the latest commit. */
export const LIVE_STATE_LOCKING = liveState(' for update');

/**
 * Records step :index of the token's live claim if the live steps under the
 * id end right before it, and keeps every earlier step as long as this one,
 * in one statement: the earlier live steps are written again, and the
 * duplicate key turns that into a renewal of their expiry (and the steps'
 * fingerprint becomes the saver's). An expired row at :index is written over.
 * It writes (affects a row) only when it saved the step.
 */
export const SAVE_STEP = statement(
  ['id', 'token', 'index', 'name', 'fingerprint', 'body', 'ttl'],
  `
    insert into idempotency_steps (id, seq, name, fingerprint, body, expires_at)
    select :id, :index, :name, :fingerprint, :body, ${later(':ttl')} from dual
     where exists (select 1 from idempotency_keys where id = :id and ${HELD})
       and (select count(*) from idempotency_steps where id = :id and expires_at > ${NOW}) = :index
    union all
    select id, seq, name, :fingerprint, body, ${later(':ttl')} from idempotency_steps
     where id = :id and seq < :index and expires_at > ${NOW}
       and exists (select 1 from idempotency_keys where id = :id and ${HELD})
       and (select count(*) from idempotency_steps where id = :id and expires_at > ${NOW}) = :index
    on duplicate key update name = values(name), fingerprint = values(fingerprint), body = values(body),
                            expires_at = values(expires_at)`,
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
export const RELEASE = statement(['id', 'token'], `delete from idempotency_keys where id = :id and ${HELD}`);

/** Renews the token's live claim, and records its new lease. */
export const EXTEND = statement(
  ['id', 'token', 'lockTtl', 'lockTtlColumn'],
  `
    update idempotency_keys set lock_ttl = :lockTtlColumn, expires_at = ${later(':lockTtl')}
     where id = :id and ${HELD}`,
);

/** Whether the token holds a live claim (a renewal that changed nothing counts 0 rows without CLIENT_FOUND_ROWS). */
export const HOLDS = statement(
  ['id', 'token'],
  `select exists (select 1 from idempotency_keys where id = :id and ${HELD}) as held`,
);

/**
 * Deletes up to :batchSize expired rows, oldest first, through the index on
 * expires_at. MySQL's DELETE has no SKIP LOCKED: a row someone is writing
 * makes the purge wait for it (briefly: every write is one statement).
 */
const purge = (table: string) =>
  statement(['batchSize'], `delete from ${table} where expires_at <= ${NOW} order by expires_at limit :batchSize`);
export const PURGE = purge('idempotency_keys');
export const PURGE_STEPS = purge('idempotency_steps');

import type { RecordedSteps } from '../../core/store.js';

// The PostgreSQL store's SQL: each statement, its parameters by name, and how
// values cross it (bodies without NUL, whole milliseconds, rows of any driver).

/** The rows of a result: node-postgres and PGlite return { rows }, postgres-js an array of rows. */
export function rowsOf(result: unknown): Record<string, unknown>[] {
  if (Array.isArray(result)) return result as Record<string, unknown>[];
  const rows = (result as { rows?: unknown } | null)?.rows;
  return Array.isArray(rows) ? (rows as Record<string, unknown>[]) : [];
}

/**
 * PostgreSQL `text` cannot hold NUL: a body with one is stored as \u0001 and
 * its UTF-8 in base64 (as is a body that starts with \u0001, so that reading
 * is never ambiguous). No JSON text does either, so the common case costs a scan.
 */
export const encodeBody = (body: string): string =>
  body.charCodeAt(0) === 1 || body.includes('\u0000') ? `\u0001${Buffer.from(body).toString('base64')}` : body;
export const decodeBody = (stored: string): string =>
  stored.charCodeAt(0) === 1 ? Buffer.from(stored.slice(1), 'base64').toString() : stored;

/** The steps a claim read, from the JSON text of [name, body, fingerprint] arrays (see CLAIM). */
export function parseSteps(text: unknown): RecordedSteps {
  const rows = JSON.parse(String(text)) as [string, string, string][];
  return {
    fingerprint: rows[0]?.[2] ?? '',
    steps: rows.map(([name, body]) => ({ name, body: decodeBody(body) })),
  };
}

/** Milliseconds as a parameter: whole, as the statements multiply it by `interval '1 millisecond'`. */
export const ms = (value: number): number => Math.ceil(value);

/**
 * One of the store's statements: fixed text, prepared by `prepared` in
 * drizzleStore; a call only passes the values, by name, in the order of
 * `params` ($1, $2...).
 */
export interface Statement<K extends string> {
  /**
   * The name of the server-side prepared statement, unique to this text;
   * undefined for a statement parsed and planned at each call.
   */
  readonly name: string | undefined;
  readonly text: string;
  readonly params: readonly K[];
}

/** A statement of `params` and `text`; `named` false for one planned at each call. */
export function statement<const K extends string>(params: readonly K[], text: string, named = true): Statement<K> {
  // FNV-1a of the text: a changed statement never reuses the name of another on a connection.
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return { name: named ? `trpc_idempotency_${(hash >>> 0).toString(36)}` : undefined, text, params };
}

/**
 * The lease a claim or renewal asked for, as `lock_ttl` stores it (ms, an
 * integer column): null when it does not fit, as on rows from before it was
 * kept. `param` is the statement's lockTtl parameter.
 */
const LOCK_TTL = (param: string): string => `case when ${param}::float8 <= 2147483647 then ${param}::float8::int end`;

/**
 * The claim, in one statement. `seen` reads the key's row in the statement's
 * snapshot, `live` that row if it has not expired. `claimed` inserts the
 * claim, or takes over a row that has expired (or is this token's own live
 * claim), unless the deadline has passed; it does not even try when `live`
 * shows a row it could not take (another token's claim, or an outcome), so a
 * replay or an in-flight rejection writes nothing: no row lock, no WAL, no
 * commit to wait for. The result, in one row: whether it was taken, the live
 * row, and, when the row was free to take, the server's clock.
 *
 * The reads see the statement's snapshot; the insert's conflict check and the
 * takeover see the latest commits. When they differ, the claim takes nothing
 * and finds nothing, and the caller runs it again (a new snapshot):
 * - a concurrent claim committed after the snapshot (the INSERT waited for it
 *   and found it live);
 * - the row changed hands after the snapshot (its latest token is not the one
 *   `seen` read): another holder may have recorded steps meanwhile, which
 *   this snapshot cannot see, so taking the row on it would run them again.
 *   A holder's release, and an operator's forget of a claim, therefore leave
 *   the row in place, expired (RELEASE, admin FORGET), rather than deleting
 *   it: a deleted row would let the insert through unseen; and the purge
 *   keeps a claim's expired row while it has live steps (PURGE).
 *
 * A claim that takes the row sets `created_at` to its time (a token's own
 * claim sent again keeps it) and `lock_ttl` to its lease (the operator's
 * view, see admin.ts); it also reads the steps recorded under its id
 * (`idempotency_steps`), as a JSON array of [name, body, fingerprint], in order.
 *
 * $1 id, $2 fingerprint, $3 token, $4 lockTtl (ms),
 * $5 deadline (timestamptz text: ISO 8601, or 'infinity' for none).
 */
export const CLAIM = statement(
  ['id', 'fingerprint', 'token', 'lockTtl', 'deadline'],
  `
    with seen as (
      select state, fingerprint, token, body, expires_at from idempotency_keys where id = $1
    ), live as (
      select state, fingerprint, token, body from seen where expires_at > statement_timestamp()
    ), claimed as (
      insert into idempotency_keys as k (id, state, fingerprint, token, body, expires_at, created_at, lock_ttl)
      select $1, 'in_progress', $2, $3, null, statement_timestamp() + ($4::float8 * interval '1 millisecond'), statement_timestamp(),
             ${LOCK_TTL('$4')}
       where statement_timestamp() <= $5::timestamptz
         and not exists (select from live where not (live.token = $3 and live.state = 'in_progress'))
      on conflict (id) do update
        set state = 'in_progress', fingerprint = excluded.fingerprint, token = excluded.token, body = null,
            expires_at = excluded.expires_at, lock_ttl = excluded.lock_ttl,
            created_at = case when k.expires_at <= statement_timestamp() then excluded.created_at else k.created_at end
        where (k.expires_at <= statement_timestamp() and k.token is not distinct from (select token from seen))
           or (k.token = excluded.token and k.state = 'in_progress')
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
 * the row: a completion sent twice by the same holder writes nothing the
 * second time, and the store answers it `stored` (LIVE_STATE).
 * An outcome has no lease: `lock_ttl` is null. `created_at` stays the time of
 * the token's claim; a row taken from another (expired) gets the completion's.
 *
 * $1 id, $2 state ('completed' | 'failed'), $3 fingerprint, $4 token,
 * $5 body (encoded, see encodeBody), $6 ttl (ms).
 */
export const COMPLETE = statement(
  ['id', 'state', 'fingerprint', 'token', 'body', 'ttl'],
  `
    insert into idempotency_keys as k (id, state, fingerprint, token, body, expires_at, created_at, lock_ttl)
    values ($1, $2, $3, $4, $5, statement_timestamp() + ($6::float8 * interval '1 millisecond'), statement_timestamp(), null)
    on conflict (id) do update
      set state = excluded.state, fingerprint = excluded.fingerprint, token = excluded.token, body = excluded.body,
          expires_at = excluded.expires_at, lock_ttl = null,
          created_at = case when k.token = $4 then k.created_at else excluded.created_at end
      where (k.token = $4 and k.state = 'in_progress') or k.expires_at <= statement_timestamp()
    returning 1`,
);

/** As COMPLETE, and once stored, deletes the operation's recorded steps (CompleteInput.clearSteps). */
export const COMPLETE_CLEARING_STEPS = statement(
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
export const SAVE_STEP = statement(
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

/** The state and token of a live row, after a refused completion. $1 id. */
export const LIVE_STATE = statement(
  ['id'],
  `
    select state, token from idempotency_keys where id = $1 and expires_at > statement_timestamp()`,
);

/**
 * Ends the token's live claim: the row stays, expired now, until a claim takes
 * it over or the purge deletes it (see CLAIM for why it is not deleted).
 * $1 id, $2 token.
 */
export const RELEASE = statement(
  ['id', 'token'],
  `
    update idempotency_keys set expires_at = statement_timestamp()
     where id = $1 and token = $2 and state = 'in_progress' and expires_at > statement_timestamp()
    returning 1`,
);

/** Renews the token's live claim, and records its new lease. $1 id, $2 token, $3 lockTtl (ms). */
export const EXTEND = statement(
  ['id', 'token', 'lockTtl'],
  `
    update idempotency_keys
       set expires_at = statement_timestamp() + ($3::float8 * interval '1 millisecond'), lock_ttl = ${LOCK_TTL('$3')}
     where id = $1 and token = $2 and state = 'in_progress' and expires_at > statement_timestamp()
    returning 1`,
);

/**
 * Deletes up to $1 expired rows. SKIP LOCKED: never wait for, nor block, a
 * row someone is working on. $1 batch size. Not named: it runs seldom, and
 * planned with its batch size it keeps to the index on expires_at. `keep`:
 * a further condition a row must not meet to go.
 */
const purge = (table: string, key: string, keep = 'false') =>
  statement(
    ['batchSize'],
    `
    with gone as (
      delete from ${table}
       where (${key}) in (select ${key} from ${table} t
                     where expires_at <= statement_timestamp() and not (${keep})
                     order by expires_at limit $1
                     for update skip locked)
      returning 1)
    select count(*)::int as n from gone`,
    false,
  );
/**
 * An expired claim stays while steps recorded under its id live: deleting it
 * could let a claim that began before the steps were recorded take the key
 * without them (see CLAIM). It goes once they have expired.
 */
export const PURGE = purge(
  'idempotency_keys',
  'id',
  `t.state = 'in_progress' and exists (select from idempotency_steps s where s.id = t.id and s.expires_at > statement_timestamp())`,
);
/** Deletes up to $1 expired steps (see schema.ts), as PURGE does rows. */
export const PURGE_STEPS = purge('idempotency_steps', 'id, seq');

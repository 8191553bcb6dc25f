import { checkWholeNumber } from '../../core/options.js';
import { escapePart } from '../../core/record-id.js';
import type {
  ForgetInput,
  InspectInput,
  ListInput,
  ListPage,
  RecordInfo,
  RecordState,
  RecordSummary,
  StoreAdmin,
} from '../../core/store-admin.js';
import { EXPIRY_ROUNDING } from '../../core/store-admin.js';
import { decodeBody, ms, type Statement, statement } from './statements.js';

// The PostgreSQL store's operator API (StoreAdmin): one statement per call,
// prepared as the store's own, on the server's clock (statement_timestamp()).

/**
 * The UTF-8 size of a stored body (see encodeBody): its octets, or those of
 * the base64 it holds after \u0001. `substr` reads only the first characters
 * of a long body, and `octet_length` its size from the TOAST header.
 */
const bytesOf = (column: string): string =>
  `case when substr(${column}, 1, 1) = chr(1) then octet_length(decode(substr(${column}, 2), 'base64'))
        else octet_length(${column}) end`;

/**
 * A timestamptz in whole ms since the epoch (PostgreSQL keeps microseconds): floored, as Redis's
 * TIME is read, so every store's admin gives its times in one format.
 */
const msOf = (value: string): string => `floor(date_part('epoch', ${value}) * 1000)`;

/** The columns of a RecordSummary, as a JSON array (see `summary`), of a row `k` of idempotency_keys. */
const SUMMARY = `json_build_array(k.id, k.state, k.fingerprint, k.token, ${msOf('k.created_at')},
                          ${msOf('k.expires_at')}, k.lock_ttl,
                          case when k.state <> 'in_progress' then coalesce(${bytesOf('k.body')}, 0) end)`;

type SummaryColumns = [
  id: string,
  state: RecordState,
  fingerprint: string,
  token: string | null,
  claimedAt: number,
  expiresAt: number,
  lockTtl: number | null,
  bytes: number | null,
];

function summary([id, state, fingerprint, token, claimedAt, expiresAt, lockTtl, bytes]: SummaryColumns): RecordSummary {
  const out: RecordSummary = { id, state, fingerprint, claimedAt, expiresAt };
  if (token !== null) out.token = token;
  // An outcome has no lease (its lock_ttl is null); the table does not track waiters.
  if (state === 'in_progress') {
    if (lockTtl !== null) out.lockTtl = lockTtl;
  } else {
    out.bytes = bytes ?? 0;
  }
  return out;
}

/**
 * One record and its steps, in one round trip: the row if it is live, its
 * outcome when $2, and the live steps recorded under the id (name, size, in
 * order; when they expire: the soonest). $1 id, $2 body (boolean).
 */
export const INSPECT = statement(
  ['id', 'body'],
  `
    select ${msOf('statement_timestamp()')} as time,
           case when k.id is not null then ${SUMMARY}::text end as record,
           case when $2::boolean and k.state <> 'in_progress' then k.body end as body,
           (select json_build_array(
                     json_agg(json_build_array(s.name, ${bytesOf('s.body')}) order by s.seq),
                     ${msOf('min(s.expires_at)')})::text
              from idempotency_steps s where s.id = $1 and s.expires_at > statement_timestamp()
            having count(*) > 0) as steps
      from (values (1)) as one (x)
      left join idempotency_keys k on k.id = $1 and k.expires_at > statement_timestamp()`,
);

/**
 * One page of a listing: up to $2 rows after the id $1 (keyset, through the
 * primary key), `from` choosing the rows the page reads. The result, in one
 * row: how many rows the page read, its last id, the time, how many it
 * examined (live, in state $3 (null: any) and of the operation name $4,
 * escaped as in the id (null: any)), and those of them claimed at least $5 ms
 * ago (null: any), as JSON.
 */
const listPage = (from: string) =>
  statement(
    ['after', 'limit', 'state', 'name', 'olderThan'],
    `
    with page as (
      select id, state, fingerprint, token, body, created_at, expires_at, lock_ttl
        from idempotency_keys where id > $1 ${from} order by id limit $2::int
    ), examined as (
      select * from page k
       where k.expires_at > statement_timestamp()
         and ($3::text is null or k.state = $3::text)
         and ($4::text is null or split_part(k.id, ':', 2) = $4::text)
    )
    select (select count(*)::int from page) as read,
           (select max(id) from page) as last,
           ${msOf('statement_timestamp()')} as time,
           (select count(*)::int from examined) as examined,
           (select json_agg(${SUMMARY} order by k.id)::text
              from examined k
             where $5::float8 is null or k.created_at <= statement_timestamp() - $5::float8 * interval '1 millisecond'
           ) as records`,
  );
/** Every row, in id order. */
export const LIST = listPage('');
/** The claims in progress only, in id order, through the partial index idempotency_keys_in_progress_idx. */
export const LIST_IN_PROGRESS = listPage(`and state = 'in_progress'`);

/**
 * Deletes the record if it is live and still in state $2 with token $3 ($2
 * 'absent': only if there is no live row), then, when $4, the steps under
 * its id, if the record went or was absent. A claim is not deleted but
 * expired now, as its holder's release does (see CLAIM in statements.ts: a
 * claim that began before it would otherwise not see the steps its holder
 * recorded meanwhile); the purge deletes it. The result: whether a row or a
 * live step was deleted. $1 id, $2 state, $3 token, $4 steps (boolean), $5 the latest
 * expiry (ms since the epoch) the row may have (a claim renewed since the
 * operator's read is kept), or null for no check.
 */
export const FORGET = statement(
  ['id', 'state', 'token', 'steps', 'expires'],
  `
    with expired as (
      update idempotency_keys set expires_at = statement_timestamp()
       where id = $1 and state = $2::text and $2::text = 'in_progress' and token is not distinct from $3::text
         and expires_at > statement_timestamp()
         and ($5::float8 is null or ${msOf('expires_at')} <= $5::float8)
      returning 1
    ), deleted as (
      delete from idempotency_keys
       where id = $1 and state = $2::text and $2::text <> 'in_progress' and token is not distinct from $3::text
         and expires_at > statement_timestamp()
         and ($5::float8 is null or ${msOf('expires_at')} <= $5::float8)
      returning 1
    ), record as (
      select from expired union all select from deleted
    ), steps as (
      delete from idempotency_steps
       where id = $1 and $4::boolean
         and (exists (select from record)
              or ($2::text = 'absent'
                  and not exists (select from idempotency_keys where id = $1 and expires_at > statement_timestamp())))
      returning expires_at > statement_timestamp() as live
    )
    select exists (select from record) or exists (select from steps where live) as deleted`,
);

/** How the admin runs a statement: on the store's database, as the store runs its own. */
export type RunStatement = <K extends string>(
  query: Statement<K>,
  values: Record<K, unknown>,
) => Promise<Record<string, unknown>[]>;

const DEFAULT_LIMIT = 1_000;

/** A JSON column (text), parsed; null stays null. */
const json = <T>(value: unknown): T | null =>
  value === null || value === undefined ? null : (JSON.parse(String(value)) as T);

/**
 * The PostgreSQL store's {@link StoreAdmin}. `inspect`, a page of `list` and
 * `forget` are one statement each. The table does not track waiters, so
 * `waiting` is never given; it has no LISTEN/NOTIFY, so `forget` has no one
 * to tell: a waiter finds the key free at its next poll.
 */
export function drizzleAdmin(run: RunStatement): StoreAdmin {
  return {
    async inspect({ id, body = false }: InspectInput): Promise<RecordInfo> {
      const [row] = await run(INSPECT, { id, body: body === true });
      if (row === undefined) throw new Error('drizzleStore: the inspect statement returned no row.');
      const time = Number(row.time);
      const record = json<SummaryColumns>(row.record);
      const info: RecordInfo =
        record === null ? { id, state: 'absent', time, steps: [] } : { ...summary(record), time, steps: [] };
      if (record !== null && record[1] !== 'in_progress' && row.body !== null && row.body !== undefined) {
        info.body = decodeBody(String(row.body));
      }
      const steps = json<[[string, number][], number]>(row.steps);
      if (steps !== null) {
        info.steps = steps[0].map(([name, bytes]) => ({ name, bytes }));
        info.stepsExpireAt = steps[1];
      }
      return info;
    },

    async list({ state, name, olderThan, cursor, limit = DEFAULT_LIMIT }: ListInput): Promise<ListPage> {
      checkWholeNumber(limit, 'limit', 'drizzleStore admin.list', { min: 1, max: 2_147_483_647 });
      const [row] = await run(state === 'in_progress' ? LIST_IN_PROGRESS : LIST, {
        // '' sorts before every id (an id is never empty).
        after: cursor ?? '',
        limit,
        state: state ?? null,
        // The name as the id holds it: its middle part, escaped (no ':' in it).
        name: name === undefined ? null : escapePart(name),
        olderThan: olderThan === undefined ? null : ms(olderThan),
      });
      if (row === undefined) throw new Error('drizzleStore: the list statement returned no row.');
      const records = (json<SummaryColumns[]>(row.records) ?? []).map(summary);
      const page: ListPage = { records, examined: Number(row.examined), time: Number(row.time) };
      // A full page may have rows after it; a shorter one read the last.
      if (Number(row.read) === limit && row.last !== null && row.last !== undefined) page.cursor = String(row.last);
      return page;
    },

    async forget({ id, state, token, steps = false, expiresAt }: ForgetInput): Promise<boolean> {
      const [row] = await run(FORGET, {
        id,
        state,
        token: token ?? null,
        steps: steps === true,
        expires: expiresAt === undefined ? null : expiresAt + EXPIRY_ROUNDING,
      });
      return row?.deleted === true;
    },
  };
}

import type { StoreAdmin } from '../../../core/store-admin.js';
import { positionalAdmin, type RunStatement } from '../positional-admin.js';
import { decodeBody } from '../statements.js';
import { NOW, statement } from './statements.js';

// The SQLite store's operator API (StoreAdmin, see positional-admin.ts), on the
// clock of the machine that runs the statement.

/**
 * The UTF-8 size of a stored body (see encodeBody): its bytes, or those of the
 * base64 it holds after \u0001 (SQLite's length() counts characters).
 */
const bytesOf = (column: string): string =>
  `case when substr(${column}, 1, 1) = char(1)
        then (length(${column}) - 1) / 4 * 3 - (substr(${column}, -1) = '=') - (substr(${column}, -2, 1) = '=')
        else length(cast(${column} as blob)) end`;

/** The columns of a RecordSummary, of a row `k` of idempotency_keys (sizes, never bodies). */
const SUMMARY = `k.id, k.state, k.fingerprint, k.token, k.created_at as claimed_at, k.expires_at, k.lock_ttl,
                 ${bytesOf('k.body')} as bytes`;

const INSPECT = statement(
  ['id', 'body'],
  `
    select ${NOW} as time, ${SUMMARY},
           case when :body and k.state <> 'in_progress' then k.body end as body,
           s.name as step_name, ${bytesOf('s.body')} as step_bytes, s.expires_at as step_expires_at
      from (select 1) as one
      left join idempotency_keys k on k.id = :id and k.expires_at > ${NOW}
      left join idempotency_steps s on s.id = :id and s.expires_at > ${NOW}
     order by s.seq`,
);

/** Up to :limit rows after the id :after, in id order (through the primary key), with the clock on each. */
const listPage = (where: string) =>
  statement(
    ['after', 'limit'],
    `
    select ${NOW} as time, ${NOW} < k.expires_at as live, ${SUMMARY}
      from idempotency_keys k where k.id > :after ${where} order by k.id limit :limit`,
  );
/** The claims in progress only, through the partial index idempotency_keys_in_progress_idx. */
const LIST_IN_PROGRESS = listPage(`and k.state = 'in_progress'`);

/** Deletes the record if it is live and still in state :state with token :token (and expires by :expires). */
const FORGET_RECORD = statement(
  ['id', 'state', 'token', 'expires'],
  `delete from idempotency_keys
    where id = :id and state = :state and token is :token and expires_at > ${NOW}
      and (:expires is null or expires_at <= :expires)
   returning 1 as done`,
);

/** Deletes the live steps under the id if it has no live record (a claim taken since keeps them). */
const FORGET_STEPS = statement(
  ['id'],
  `delete from idempotency_steps
    where id = :id and expires_at > ${NOW}
      and not exists (select 1 from idempotency_keys where id = :id and expires_at > ${NOW})`,
);

/**
 * The SQLite store's {@link StoreAdmin}: `inspect` and a page of `list` are one
 * statement each; `forget` deletes the record, then (if asked) the steps
 * under its id unless a claim has taken it since.
 */
export function sqliteAdmin(run: RunStatement): StoreAdmin {
  return positionalAdmin(run, {
    INSPECT,
    LIST: listPage(''),
    LIST_IN_PROGRESS,
    TIME: statement<never>([], `select ${NOW} as time`),
    FORGET_STEPS,
    async forgetRecord(run, { id, state, token, steps, expires }) {
      const forgotten = (await run(FORGET_RECORD, { id, state, token, expires })).rows.length > 0;
      if (forgotten && steps) await run(FORGET_STEPS, { id });
      return forgotten;
    },
    param: (value) => value,
    text: String,
    body: (value) => decodeBody(String(value)),
  });
}

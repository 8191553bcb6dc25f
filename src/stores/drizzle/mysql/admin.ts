import type { StoreAdmin } from '../../../core/store-admin.js';
import { positionalAdmin, type RunStatement } from '../positional-admin.js';
import { bytes, msOf, statement, text } from './statements.js';

// The MySQL/MariaDB store's operator API (StoreAdmin), on the server's clock
// (UTC_TIMESTAMP(3)). Reads are one statement; a page of a listing reads at
// most `limit` rows and filters them here.

const NOW = 'utc_timestamp(3)';

/** The columns of a RecordSummary, of a row `k` of idempotency_keys (sizes, never bodies). */
const SUMMARY = `k.id, k.state, k.fingerprint, k.token, ${msOf('k.created_at')} as claimed_at,
                 ${msOf('k.expires_at')} as expires_at, k.lock_ttl, length(k.body) as bytes`;

/**
 * One record and its steps: the row if it is live (its outcome when :body),
 * then one row per live step (name, size), in order.
 */
export const INSPECT = statement(
  ['id', 'body'],
  `
    select ${msOf(NOW)} as time, ${SUMMARY},
           case when :body and k.state <> 'in_progress' then k.body end as body,
           s.name as step_name, length(s.body) as step_bytes, ${msOf('s.expires_at')} as step_expires_at
      from (select 1 as one) as one
      left join idempotency_keys k on k.id = :id and k.expires_at > ${NOW}
      left join idempotency_steps s on s.id = :id and s.expires_at > ${NOW}
     order by s.seq`,
);

/** Up to :limit rows after the id :after, in id order (byte order), with the clock on each. */
const listPage = (where: string) =>
  statement(
    ['after', 'limit'],
    `
    select ${msOf(NOW)} as time, ${NOW} < k.expires_at as live, ${SUMMARY}
      from idempotency_keys k where k.id > :after ${where} order by k.id limit :limit`,
  );
/** Every row. */
export const LIST = listPage('');
/** The claims in progress only, through the index on state (which InnoDB orders by id within a state). */
export const LIST_IN_PROGRESS = listPage(`and k.state = 'in_progress'`);
/** The clock, for a page that read no row. */
const TIME = statement<never>([], `select ${msOf(NOW)} as time`);

/**
 * Deletes the record if it is live and still in state :state with token
 * :token (and expires no later than :expires, ms, when given), and with it,
 * when :steps, the live steps under its id: one statement for both tables.
 */
const FORGET_RECORD = statement(
  ['id', 'state', 'token', 'steps', 'expires'],
  `
    delete k, s from idempotency_keys k
      left join idempotency_steps s on s.id = k.id and :steps and s.expires_at > ${NOW}
     where k.id = :id and k.state = :state and k.token <=> :token and k.expires_at > ${NOW}
       and (:expires is null or ${msOf('k.expires_at')} <= :expires)`,
);

/** Deletes the live steps under the id if it has no live record. */
export const FORGET_STEPS = statement(
  ['id'],
  `
    delete from idempotency_steps
     where id = :id and expires_at > ${NOW}
       and not exists (select 1 from idempotency_keys where id = :id and expires_at > ${NOW})`,
);

/**
 * The MySQL/MariaDB store's {@link StoreAdmin} (see positional-admin.ts): `inspect`, a page of `list` and `forget`
 * are one statement each.
 */
export function mysqlAdmin(run: RunStatement): StoreAdmin {
  return positionalAdmin(run, {
    INSPECT,
    LIST,
    LIST_IN_PROGRESS,
    TIME,
    FORGET_STEPS,
    forgetRecord: async (run, values) => (await run(FORGET_RECORD, values)).affected > 0,
    param: bytes,
    text,
    body: text,
  });
}

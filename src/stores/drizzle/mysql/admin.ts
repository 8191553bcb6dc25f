import { checkWholeNumber } from '../../../core/options.js';
import { escapePart } from '../../../core/record-id.js';
import type {
  ForgetInput,
  InspectInput,
  ListInput,
  ListPage,
  RecordInfo,
  RecordState,
  RecordSummary,
  StoreAdmin,
} from '../../../core/store-admin.js';
import { EXPIRY_ROUNDING } from '../../../core/store-admin.js';
import { bytes, ms, msOf, type Statement, statement, text, textOrUndefined } from './statements.js';

// The MySQL/MariaDB store's operator API (StoreAdmin), on the server's clock
// (UTC_TIMESTAMP(3)). Reads are one statement; a page of a listing reads at
// most `limit` rows and filters them here.

const NOW = 'utc_timestamp(3)';

/** The columns of a RecordSummary, of a row `k` of idempotency_keys (sizes, never bodies). */
const SUMMARY = `k.id, k.state, k.fingerprint, k.token, ${msOf('k.created_at')} as claimed_at,
                 ${msOf('k.expires_at')} as expires_at, k.lock_ttl, length(k.body) as bytes`;

function summary(row: Record<string, unknown>): RecordSummary {
  const state = String(row.state) as RecordState;
  const out: RecordSummary = {
    id: text(row.id),
    state,
    fingerprint: text(row.fingerprint),
    claimedAt: Number(row.claimed_at),
    expiresAt: Number(row.expires_at),
  };
  const token = textOrUndefined(row.token);
  if (token !== undefined) out.token = token;
  // An outcome has no lease (its lock_ttl is null); the table does not track waiters.
  if (state === 'in_progress') {
    if (row.lock_ttl !== null && row.lock_ttl !== undefined) out.lockTtl = Number(row.lock_ttl);
  } else {
    out.bytes = Number(row.bytes ?? 0);
  }
  return out;
}

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
const TIME = statement([], `select ${msOf(NOW)} as time`);

/**
 * Deletes the record if it is live and still in state :state with token
 * :token (and expires no later than :expires, ms, when given), and with it,
 * when :steps, the live steps under its id: one statement for both tables.
 */
export const FORGET_RECORD = statement(
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

/** How the admin runs a statement: on the store's database, as the store runs its own; rows, or the write's count. */
export type RunStatement = <K extends string>(
  query: Statement<K>,
  values: Record<K, unknown>,
) => Promise<{ rows: Record<string, unknown>[]; affected: number }>;

const DEFAULT_LIMIT = 1_000;

/**
 * The MySQL/MariaDB store's {@link StoreAdmin}. `inspect`, a page of `list`
 * and `forget` are one statement each. The table does not track waiters, so
 * `waiting` is never given; `forget` has no one to tell: a waiter finds the
 * key free at its next poll.
 */
export function mysqlAdmin(run: RunStatement): StoreAdmin {
  return {
    async inspect({ id, body = false }: InspectInput): Promise<RecordInfo> {
      const { rows } = await run(INSPECT, { id: bytes(id), body: body === true });
      const [first] = rows;
      if (first === undefined) throw new Error('drizzleStore: the inspect statement returned no row.');
      const time = Number(first.time);
      const info: RecordInfo =
        first.id === null || first.id === undefined
          ? { id, state: 'absent', time, steps: [] }
          : { ...summary(first), time, steps: [] };
      if (info.state !== 'absent' && info.state !== 'in_progress' && first.body !== null && first.body !== undefined) {
        info.body = text(first.body);
      }
      for (const row of rows) {
        if (row.step_name === null || row.step_name === undefined) continue;
        info.steps.push({ name: text(row.step_name), bytes: Number(row.step_bytes) });
        const expires = Number(row.step_expires_at);
        if (info.stepsExpireAt === undefined || expires < info.stepsExpireAt) info.stepsExpireAt = expires;
      }
      return info;
    },

    async list({ state, name, olderThan, cursor, limit = DEFAULT_LIMIT }: ListInput): Promise<ListPage> {
      checkWholeNumber(limit, 'limit', 'drizzleStore admin.list', { min: 1, max: 2_147_483_647 });
      // '' sorts before every id (an id is never empty).
      const { rows } = await run(state === 'in_progress' ? LIST_IN_PROGRESS : LIST, {
        after: bytes(cursor ?? ''),
        limit,
      });
      const time = Number(rows[0]?.time ?? (await run(TIME, {})).rows[0]?.time);
      // The name as the id holds it: its middle part, escaped (no ':' in it).
      const escaped = name === undefined ? undefined : escapePart(name);
      const examined = rows
        .filter((row) => Number(row.live) === 1 && (state === undefined || row.state === state))
        .map(summary)
        .filter((record) => escaped === undefined || record.id.split(':')[1] === escaped);
      const records = olderThan === undefined ? examined : examined.filter((r) => r.claimedAt! <= time - ms(olderThan));
      const page: ListPage = { records, examined: examined.length, time };
      // A full page may have rows after it; a shorter one read the last.
      if (rows.length === limit) page.cursor = text(rows.at(-1)!.id);
      return page;
    },

    async forget({ id, state, token, steps = false, expiresAt }: ForgetInput): Promise<boolean> {
      if (state === 'absent') {
        return steps === true && (await run(FORGET_STEPS, { id: bytes(id) })).affected > 0;
      }
      const { affected } = await run(FORGET_RECORD, {
        id: bytes(id),
        state,
        token: token === undefined ? null : bytes(token),
        steps: steps === true,
        expires: expiresAt === undefined ? null : expiresAt + EXPIRY_ROUNDING,
      });
      return affected > 0;
    },
  };
}

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
import type { Statement } from './positional.js';

// The operator API (StoreAdmin) of the stores whose statements take positional
// parameters (MySQL/MariaDB, SQLite), on the database's clock. Reads are one
// statement; a page of a listing reads at most `limit` rows and filters them here.

/** How the admin runs a statement: on the store's database, as the store runs its own; rows, or the write's count. */
export type RunStatement = <K extends string>(
  query: Statement<K>,
  values: Record<K, unknown>,
) => Promise<{ rows: Record<string, unknown>[]; affected: number }>;

/** A dialect's statements (see mysql/admin.ts) and how values cross them. */
export interface AdminDialect {
  /** One record and its steps: the clock, the row if live (its outcome when :body), then a row per live step. */
  readonly INSPECT: Statement<'id' | 'body'>;
  /** Up to :limit rows after the id :after, in id order, with the clock and `live` on each. */
  readonly LIST: Statement<'after' | 'limit'>;
  /** The same, of the claims in progress only. */
  readonly LIST_IN_PROGRESS: Statement<'after' | 'limit'>;
  /** The clock, for a page that read no row. */
  readonly TIME: Statement<never>;
  /** Deletes the live steps under the id if it has no live record. */
  readonly FORGET_STEPS: Statement<'id'>;
  /** Deletes the record if it is live and still in `state` with `token` (and `expires`), and its steps when `steps`. */
  forgetRecord(
    run: RunStatement,
    values: { id: unknown; state: string; token: unknown; steps: boolean; expires: number | null },
  ): Promise<boolean>;
  /** A string as a parameter (MySQL: its UTF-8 bytes). */
  param(value: string): unknown;
  /** A text column's value as a string. */
  text(value: unknown): string;
  /** A stored body as the record's. */
  body(value: unknown): string;
}

/** The columns of a summary (id, state, fingerprint, token, claimed_at, expires_at, lock_ttl, bytes) as a RecordSummary. */
function summary(row: Record<string, unknown>, text: (value: unknown) => string): RecordSummary {
  const state = String(row.state) as RecordState;
  const out: RecordSummary = {
    id: text(row.id),
    state,
    fingerprint: text(row.fingerprint),
    claimedAt: Number(row.claimed_at),
    expiresAt: Number(row.expires_at),
  };
  if (row.token !== null && row.token !== undefined) out.token = text(row.token);
  // An outcome has no lease (its lock_ttl is null); the table does not track waiters.
  if (state === 'in_progress') {
    if (row.lock_ttl !== null && row.lock_ttl !== undefined) out.lockTtl = Number(row.lock_ttl);
  } else {
    out.bytes = Number(row.bytes ?? 0);
  }
  return out;
}

const DEFAULT_LIMIT = 1_000;

/**
 * The {@link StoreAdmin} of a store on `dialect`. `inspect` and a page of
 * `list` are one statement each. The table does not track waiters, so
 * `waiting` is never given; `forget` has no one to tell: a waiter finds the
 * key free at its next poll.
 */
export function positionalAdmin(run: RunStatement, dialect: AdminDialect): StoreAdmin {
  const { param, text } = dialect;
  return {
    async inspect({ id, body = false }: InspectInput): Promise<RecordInfo> {
      const { rows } = await run(dialect.INSPECT, { id: param(id), body: body === true });
      const [first] = rows;
      if (first === undefined) throw new Error('drizzleStore: the inspect statement returned no row.');
      const time = Number(first.time);
      const info: RecordInfo =
        first.id === null || first.id === undefined
          ? { id, state: 'absent', time, steps: [] }
          : { ...summary(first, text), time, steps: [] };
      if (info.state !== 'absent' && info.state !== 'in_progress' && first.body !== null && first.body !== undefined) {
        info.body = dialect.body(first.body);
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
      const { rows } = await run(state === 'in_progress' ? dialect.LIST_IN_PROGRESS : dialect.LIST, {
        after: param(cursor ?? ''),
        limit,
      });
      const time = Number(rows[0]?.time ?? (await run(dialect.TIME, {})).rows[0]?.time);
      // The name as the id holds it: its middle part, escaped (no ':' in it).
      const escaped = name === undefined ? undefined : escapePart(name);
      const examined = rows
        .filter((row) => Number(row.live) === 1 && (state === undefined || row.state === state))
        .map((row) => summary(row, text))
        .filter((record) => escaped === undefined || record.id.split(':')[1] === escaped);
      const records =
        olderThan === undefined ? examined : examined.filter((r) => r.claimedAt! <= time - Math.ceil(olderThan));
      const page: ListPage = { records, examined: examined.length, time };
      // A full page may have rows after it; a shorter one read the last.
      if (rows.length === limit) page.cursor = text(rows.at(-1)!.id);
      return page;
    },

    async forget({ id, state, token, steps = false, expiresAt }: ForgetInput): Promise<boolean> {
      if (state === 'absent') {
        return steps === true && (await run(dialect.FORGET_STEPS, { id: param(id) })).affected > 0;
      }
      return dialect.forgetRecord(run, {
        id: param(id),
        state,
        token: token === undefined ? null : param(token),
        steps: steps === true,
        expires: expiresAt === undefined ? null : expiresAt + EXPIRY_ROUNDING,
      });
    },
  };
}

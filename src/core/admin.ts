import { utf8Length } from '#platform';
import { hashRecordId, type IdempotencyEvent, type IdempotencyEventHandler } from './events.js';
import { IdempotencyConfigError } from './idempotency-error.js';
import { checkWholeNumber } from './options.js';
import { markerOf, TOO_LARGE_BODY, UNREPLAYABLE_BODY } from './outcome.js';
import { nameOfRecordId, recordId } from './record-id.js';
import type { IdempotencyStore } from './store.js';
import type { RecordInfo, RecordState, RecordSummary, StoreAdmin } from './store-admin.js';

/** A record named as the layer names it, or by its id (see `recordId`). */
export type RecordRef =
  | {
      /** The scope the procedure's `scope` option gave (a user or tenant id); absent for none. */
      scope?: string;
      /** The operation name: the tRPC procedure path (`payments.charge`). */
      procedure: string;
      /** The client's `Idempotency-Key`. */
      key: string;
    }
  | { id: string };

/** A record as an operator reads it: what the store keeps, and what follows from it. */
export interface InspectedRecord extends RecordInfo {
  /** The operation name (the procedure path) the record belongs to. */
  procedure: string;
  /** The `keyHash` the layer's events carry for this record: search the logs with it. */
  keyHash: string;
  /** While in progress: when the claim was last taken or renewed (`expiresAt - lockTtl`), when the store knows. */
  renewedAt?: number;
  /**
   * A `failed` record that holds no error but a marker: the operation ran,
   * and its outcome could not be kept (`unreplayable`: it could not be
   * serialized; `response_too_large`: over `maxResponseBytes`). Retries get
   * that error rather than a second run; forgetting it lets one run again.
   */
  marker?: 'unreplayable' | 'response_too_large';
  /**
   * While in progress: its holder renewed it less than half a lease ago. A
   * running holder renews every third of its lease; half leaves room for a
   * renewal on its way. A release could then run the operation twice. Undefined when the store cannot tell (no `lockTtl`).
   */
  live?: boolean;
}

export interface ReleaseInput {
  /**
   * Really delete: without it, `release` only says what it would do and why
   * (`done: false`, `reason: 'unconfirmed'`). Implied by `force`.
   * @default false
   */
  confirm?: boolean;
  /**
   * Release a claim whose holder looks alive (renewed less than half a lease ago
   * of its lease, or the store cannot tell). Its operation may still be
   * running: a retry can then run it a second time.
   * @default false
   */
  force?: boolean;
  /** Delete the recorded steps too: the next attempt runs every step again. @default false */
  steps?: boolean;
  /**
   * Forget a stored outcome (a `completed` or `failed` record): required for
   * one, since a retry then runs the operation again. Without it, a claim
   * that completed after the operator looked is not forgotten by mistake.
   * @default false
   */
  outcome?: boolean;
  /** Only if the record still carries this token: the attempt the operator inspected. */
  token?: string;
}

/** Why `release` did nothing. */
export type ReleaseRefusal =
  /** There is no record (and no step to delete). */
  | 'absent'
  /** `confirm` (or `force`) was not given: nothing was deleted. */
  | 'unconfirmed'
  /** The claim's holder looks alive and `force` was not given. */
  | 'live'
  /** The record holds a stored outcome and `outcome` was not given. */
  | 'outcome'
  /** The record changed between the read and the delete (completed, released, taken over): nothing was deleted. */
  | 'changed';

export type ReleaseResult =
  | { done: true; record: InspectedRecord }
  | { done: false; reason: ReleaseRefusal; record: InspectedRecord; message: string };

export interface ScanInput {
  /** Only this procedure's records. */
  procedure?: string;
  /**
   * The most records read in all, across pages (rows; keys on Redis, the
   * store's or not, as SCAN walks them): the cost is bounded by it, and the
   * answer says when it stopped short (`complete: false`).
   * @default 100_000
   */
  max?: number;
}

export interface StuckInput extends ScanInput {
  /** Claims taken at least this long ago, in ms. */
  olderThan: number;
}

export interface StuckResult {
  records: (RecordSummary & { procedure: string; keyHash: string; renewedAt?: number; live?: boolean })[];
  /** The store's clock when the last page was read: what `claimedAt` and `renewedAt` compare with. */
  time: number;
  /** The claims in progress (of `procedure`, when given) examined, whatever their age (see `ListPage.examined`). */
  examined: number;
  /** Every record was examined (false: `max` was reached first). */
  complete: boolean;
}

export interface StatsResult {
  /** Live records by state. */
  byState: Record<RecordState, number>;
  /** Live records by procedure, then state. */
  byProcedure: Record<string, Record<RecordState, number>>;
  /** The live records (of `procedure`, when given) examined: those counted (see `ListPage.examined`). */
  examined: number;
  /** Every record was examined (false: `max` was reached first). */
  complete: boolean;
}

export interface IdempotencyAdmin {
  /** The record id the layer uses for `ref`. */
  recordId(ref: RecordRef): string;
  /** Reads one record: its state, claim, lease, outcome size (the outcome itself with `body`), steps. */
  inspect(ref: RecordRef, options?: { body?: boolean }): Promise<InspectedRecord>;
  /**
   * Gives back a held claim (a retry may then run the operation), or forgets a
   * stored outcome (a retry runs the operation again), behind the guards of
   * {@link ReleaseInput}. Every deletion is an event (`released` with reason
   * `operator` or `operator_forced` for a claim, `forgotten` for an outcome or steps).
   */
  release(ref: RecordRef, input?: ReleaseInput): Promise<ReleaseResult>;
  /** Claims in progress taken at least `olderThan` ms ago, page by page. */
  stuck(input: StuckInput): Promise<StuckResult>;
  /** Live records counted by state and by procedure. */
  stats(input?: ScanInput): Promise<StatsResult>;
}

export interface IdempotencyAdminOptions {
  /** The store the application uses, with the same options (prefix, schema). */
  store: IdempotencyStore;
  /** Called with an event for every deletion (see {@link IdempotencyAdmin.release}). */
  onEvent?: IdempotencyEventHandler;
  /** Records read per store call while listing. @default 1000 */
  pageSize?: number;
}

/** The sizes of the markers stored for an outcome that ran but could not be kept. */
const MARKER_BYTES = new Set([utf8Length(UNREPLAYABLE_BODY), utf8Length(TOO_LARGE_BODY)]);
const emptyCounts = (): Record<RecordState, number> => ({ in_progress: 0, completed: 0, failed: 0 });

/**
 * A live holder renews its claim every third of `lockTtl`, so its last renewal is never older than
 * that, plus the time the next one takes to land: half a lease leaves room for a renewal on its way
 * (with a third, a running holder read as not live for the length of a round trip).
 */
function liveness(rec: RecordSummary, time: number): { renewedAt?: number; live?: boolean } {
  if (rec.state !== 'in_progress' || rec.lockTtl === undefined || rec.expiresAt === undefined) return {};
  const renewedAt = rec.expiresAt - rec.lockTtl;
  return { renewedAt, live: time - renewedAt < rec.lockTtl / 2 };
}

/**
 * Operator tools on a store: look a record up, explain it, give it back.
 * The store must offer {@link StoreAdmin} (memory, Redis and PostgreSQL do).
 */
export function idempotencyAdmin(options: IdempotencyAdminOptions): IdempotencyAdmin {
  // initialized config
  const { store, onEvent, pageSize = 1_000 } = options;
  checkWholeNumber(pageSize, 'pageSize', 'idempotencyAdmin', { min: 1 });
  const admin: StoreAdmin | undefined = store?.admin;
  if (admin === undefined) {
    throw new IdempotencyConfigError(
      'idempotencyAdmin: this store has no `admin` (the operator API). Pass a memoryStore, redisStore or drizzleStore, or implement StoreAdmin on yours.',
    );
  }
  const storeName = store.name ?? 'custom';

  const idOf = (ref: RecordRef) => ('id' in ref ? ref.id : recordId(ref.scope, ref.procedure, ref.key));

  async function read(id: string, body: boolean): Promise<InspectedRecord> {
    const info = await admin!.inspect({ id, body });
    // A marker is a short failed body: read it when the size says it may be one (rarely a second call).
    let stored = info.body;
    if (info.state === 'failed' && stored === undefined && MARKER_BYTES.has(info.bytes ?? -1)) {
      stored = (await admin!.inspect({ id, body: true })).body;
    }
    const marker = info.state === 'failed' ? markerOf(stored ?? '') : undefined;
    return {
      ...info,
      procedure: nameOfRecordId(id),
      keyHash: hashRecordId(id),
      ...liveness(info, info.time),
      ...(marker === undefined ? {} : { marker }),
    };
  }

  function report(record: InspectedRecord, started: number, forced: boolean) {
    if (onEvent === undefined) return;
    const event: IdempotencyEvent =
      record.state === 'in_progress'
        ? { result: 'released', reason: forced ? 'operator_forced' : 'operator', name: record.procedure, durationMs: 0 }
        : { result: 'forgotten', reason: 'operator', name: record.procedure, durationMs: 0 };
    if (record.state === 'completed' || record.state === 'failed') event.state = record.state;
    event.store = storeName;
    event.keyHash = record.keyHash;
    event.durationMs = performance.now() - started;
    onEvent(event);
  }

  async function scan(
    input: ScanInput & { olderThan?: number; state?: RecordState },
    visit: (r: RecordSummary, time: number) => void,
  ) {
    const { procedure, max = 100_000, olderThan, state } = input;
    // From code, not the CLI's parser: max 0 would answer complete with nothing read, a negative one read anyway.
    checkWholeNumber(max, 'max', state === 'in_progress' ? 'idempotencyAdmin.stuck' : 'idempotencyAdmin.stats', {
      min: 1,
    });
    let cursor: string | undefined;
    let examined = 0;
    // What the pages may read: a page reads about its `limit` (rows, keys), whatever it examines.
    let read = 0;
    let time = 0;
    do {
      const limit = Math.min(pageSize, max - read);
      const page = await admin!.list({ state, name: procedure, olderThan, cursor, limit });
      read += limit;
      examined += page.examined;
      for (const rec of page.records) visit(rec, page.time);
      time = page.time;
      cursor = page.cursor;
    } while (cursor !== undefined && read < max);
    return { examined, complete: cursor === undefined, time };
  }

  return {
    recordId: idOf,

    inspect(ref, { body = false } = {}) {
      return read(idOf(ref), body);
    },

    async release(ref, { confirm = false, force = false, steps = false, outcome = false, token } = {}) {
      const started = performance.now();
      const record = await read(idOf(ref), false);
      const refuse = (reason: ReleaseRefusal, message: string): ReleaseResult => ({
        done: false,
        reason,
        record,
        message,
      });
      if (record.state === 'absent' && !(steps && record.steps.length > 0)) {
        return refuse('absent', 'No record is held or stored under this key: there is nothing to release.');
      }
      const risk =
        record.state === 'in_progress'
          ? 'Releasing this claim lets the next retry run the operation; if its holder is still running, the operation runs twice.'
          : record.state === 'absent'
            ? 'Deleting the recorded steps makes the next attempt run every step again.'
            : 'Forgetting this outcome makes the next retry with this key run the operation again instead of replaying it.';
      if (token !== undefined && record.token !== token) {
        return refuse(
          'changed',
          `Nothing was deleted: the record carries the token ${record.token ?? '(none)'}, not ${token}: another attempt holds or stored it. Inspect it again.`,
        );
      }
      if ((record.state === 'completed' || record.state === 'failed') && !outcome) {
        const ran =
          record.marker === undefined
            ? ''
            : ' The operation ran: its outcome could not be kept, and retries get that error instead of running it again.';
        return refuse(
          'outcome',
          `Refused: the record holds a stored ${record.state === 'completed' ? 'result' : 'error'}.${ran} ${risk} Pass outcome to forget it.`,
        );
      }
      if (record.state === 'in_progress' && record.live !== false && !force) {
        const why =
          record.live === true
            ? `its holder renewed it ${Math.round(record.time - record.renewedAt!)} ms ago (lease ${record.lockTtl} ms): it is most likely still running`
            : 'the store does not say when it was last renewed';
        return refuse(
          'live',
          `Refused: ${why}. ${risk} Pass force to release it anyway, once you know its holder is gone.`,
        );
      }
      if (!confirm && !force) return refuse('unconfirmed', `Nothing was deleted: ${risk} Pass confirm to do it.`);
      // Unforced, a claim renewed since the read (it expires later) is kept: its holder is back.
      const deleted = await admin!.forget({
        id: record.id,
        state: record.state,
        token: record.token,
        steps,
        ...(record.state === 'in_progress' && !force && record.expiresAt !== undefined
          ? { expiresAt: record.expiresAt }
          : {}),
      });
      if (!deleted) {
        return refuse(
          'changed',
          'Nothing was deleted: the record changed since it was read (it completed, was renewed, released or taken over). Inspect it again.',
        );
      }
      report(record, started, force && record.live !== false);
      return { done: true, record };
    },

    async stuck(input) {
      const records: StuckResult['records'] = [];
      const { examined, complete, time } = await scan({ ...input, state: 'in_progress' }, (rec, time) => {
        records.push({
          ...rec,
          procedure: nameOfRecordId(rec.id),
          keyHash: hashRecordId(rec.id),
          ...liveness(rec, time),
        });
      });
      records.sort((a, b) => (a.claimedAt ?? 0) - (b.claimedAt ?? 0));
      return { records, time, examined, complete };
    },

    async stats(input = {}) {
      const byState = emptyCounts();
      const byProcedure: StatsResult['byProcedure'] = {};
      const { examined, complete } = await scan(input, (rec) => {
        if (rec.state === 'absent') return;
        byState[rec.state]++;
        const procedure = nameOfRecordId(rec.id);
        (byProcedure[procedure] ??= emptyCounts())[rec.state]++;
      });
      return { byState, byProcedure, examined, complete };
    },
  };
}

/**
 * The operator's side of the store contract: read one record as the store
 * keeps it, list records page by page, and delete one that an operator
 * decided to give back. The engine never calls it; `idempotencyAdmin` (and
 * the `trpc-idempotency` CLI on top of it) does, and adds the guards and the
 * events. Times are the store's own clock, in ms since the epoch.
 */

/**
 * A record's state as the engine sees it. `in_progress` is a live claim. Kept here, not in store.ts: the
 * store contract includes this admin (`IdempotencyStore.admin`), so this file sits below it.
 */
export type RecordState = 'in_progress' | 'completed' | 'failed';

/** One record as a listing shows it (see {@link StoreAdmin.list}). */
export interface RecordSummary {
  /** The record's id (see `recordId`), without the store's own prefix. */
  id: string;
  /** `absent`: no live record (never claimed, expired, released or forgotten). */
  state: 'absent' | RecordState;
  /** The request fingerprint the record was claimed with. */
  fingerprint?: string;
  /** The token of the claim that holds the record, or that stored its outcome: which attempt it was. */
  token?: string;
  /**
   * When the claim that holds the record (or that stored its outcome) took it.
   * Absent when the store does not know (a record written by an older version).
   */
  claimedAt?: number;
  /** When the record expires: the claim's lease while in progress, the outcome's ttl once finished. */
  expiresAt?: number;
  /**
   * While in progress: the lease its holder asked for at the claim or the last
   * renewal (`lockTtl`), so `expiresAt - lockTtl` is when it was last renewed.
   * Absent when the store does not know.
   */
  lockTtl?: number;
  /** While in progress: a request waits for the claim to settle. Absent for stores that do not track it (PostgreSQL). */
  waiting?: boolean;
  /** Once finished: the stored outcome's size, in UTF-8 bytes. */
  bytes?: number;
}

/** One step recorded by `step()`, as {@link StoreAdmin.inspect} shows it. */
export interface RecordedStepSummary {
  name: string;
  /** The step's stored result, in UTF-8 bytes. */
  bytes: number;
}

/** Everything a store knows of one record (see {@link StoreAdmin.inspect}). */
export interface RecordInfo extends RecordSummary {
  /** The store's clock when it answered: what `claimedAt` and `expiresAt` compare with. */
  time: number;
  /**
   * The steps recorded under the id, in order. They outlive a claim, so an
   * absent or in-progress record can have some; a stored outcome cleared them.
   */
  steps: RecordedStepSummary[];
  /** When the recorded steps expire, when there are some. */
  stepsExpireAt?: number;
  /** The stored outcome, as the engine replays it: only when asked (`body: true`), once finished. */
  body?: string;
}

export interface InspectInput {
  id: string;
  /** Include the stored outcome. @default false */
  body?: boolean;
}

export interface ListInput {
  /** Only records in this state. */
  state?: RecordState;
  /** Only records of this operation name (the procedure path), as given to `recordId`. */
  name?: string;
  /**
   * Only records claimed at least this long ago, in ms, by the store's clock
   * (the stuck ones, with `state: 'in_progress'`). A record whose claim time
   * the store does not know is listed.
   */
  olderThan?: number;
  /** Where the previous page ended (its `cursor`); absent for the first page. */
  cursor?: string;
  /**
   * Roughly how many records (rows, keys) one call reads: a page's cost is
   * bounded by it, not by the number it returns or examines (filters can
   * leave fewer, even none, with a cursor to go on). @default 1000
   */
  limit?: number;
}

export interface ListPage {
  records: RecordSummary[];
  /**
   * How many records this call examined: the live records it read that are
   * in the listing's `state` and of its `name` (when given), whatever their
   * age. `olderThan` then picks those it lists, so a listing of the claims in
   * progress older than 5m examines every claim in progress. Expired records,
   * other names' and states' records, and keys that are not records are not
   * counted: the same records give the same count on every store, whatever
   * index or scan it reads them through. (Redis: a record that SCAN answers
   * on two pages, as it may while Redis resizes its table, counts twice.)
   */
  examined: number;
  /** Where to go on; absent once every record was examined. */
  cursor?: string;
  /** The store's clock when the page was read. */
  time: number;
}

/** How much later than `ForgetInput.expiresAt` a record may expire and still count as not renewed: clocks read in ms round. */
export const EXPIRY_ROUNDING = 5;

export interface ForgetInput {
  id: string;
  /**
   * The record is deleted only if it is still in this state, with `token`:
   * what the operator inspected. One that changed since (completed, released,
   * taken by another attempt) is kept, and the answer is false. `absent`
   * deletes only recorded steps (with `steps: true`).
   */
  state: 'absent' | RecordState;
  /** The token the operator saw on the record (required unless `absent`). */
  token?: string;
  /** Delete the recorded steps too: the next attempt starts from the first step. @default false */
  steps?: boolean;
  /**
   * The record is deleted only if it expires no later than this (ms, the
   * store's clock; a few ms of rounding allowed): a claim renewed since the
   * operator's read expires later, and is kept. Absent: no such check.
   */
  expiresAt?: number;
}

/**
 * What a store offers operators. Reads never change a record; `forget` changes
 * only the record it names, and only as the operator last saw it.
 */
export interface StoreAdmin {
  /** Reads one record and its steps. */
  inspect(input: InspectInput): Promise<RecordInfo>;
  /** Lists live records, a page at a time, at a bounded cost per page (no `KEYS`, no full-table read in one call). */
  list(input: ListInput): Promise<ListPage>;
  /**
   * Deletes the record `id` if it is still as given (see {@link ForgetInput}),
   * and tells requests that wait for it, as a release does. True if something
   * was deleted.
   */
  forget(input: ForgetInput): Promise<boolean>;
}

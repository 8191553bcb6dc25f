/**
 * The contract between the engine and a store.
 *
 * A store implements a few atomic operations on one record and nothing else:
 * fingerprints, key validation, outcome policy, serialization and timing live
 * once in the engine. Every transition that changes a claimed record is fenced
 * by the claim's `token`: it succeeds only while the caller still holds the
 * claim, so a holder whose claim expired and was taken over can never
 * overwrite or delete the new holder's record.
 */

import type { StoreAdmin } from './store-admin.js';

export interface ClaimInput {
  /** The record's identity (scope, operation name, client key), escaped. */
  id: string;
  /** The request fingerprint, stored with the claim. */
  fingerprint: string;
  /** A unique token that fences every later transition of this claim. */
  token: string;
  /** How long the claim lives unless extended, in milliseconds. */
  lockTtl: number;
  /**
   * The caller will wait for the holder to finish: stores that can notify
   * (see {@link IdempotencyStore.onSettled}) remember to do so, and tell how
   * long the holder's claim lives (`expiresIn` on an `in_progress` answer).
   */
  waiting?: boolean;
  /**
   * The latest time the claim may take the record, in the store's own clock
   * (ms since the epoch; see {@link ClaimAnswer.time}). A claim that reaches
   * the store later (it waited in a driver's offline queue while its caller
   * gave up) takes nothing and answers `late`. Absent: no deadline.
   */
  deadline?: number;
}

/** What every claim answer may carry besides its state. */
export interface ClaimAnswer {
  /**
   * The store's clock when it took (or refused, `late`) the record, in ms
   * since the epoch: required on `acquired` and `late`, optional otherwise.
   * The engine learns from it how the store's clock relates to its own, to
   * express `deadline` in the store's clock. Never given: no deadline is sent.
   */
  time?: number;
}

export type ClaimResult = ClaimAnswer &
  /**
   * The record was absent or expired, or is the live claim of this very
   * token (a claim sent again by a driver after a reconnect): the caller
   * now holds the claim, for `lockTtl` from now.
   */
  (
    | {
        state: 'acquired';
        /**
         * The steps an earlier holder of this key recorded (see
         * {@link IdempotencyStore.saveStep}) before its claim expired or was
         * released; absent when there are none. Stores without steps never set it.
         */
        steps?: RecordedSteps;
      }
    /**
     * Another caller holds a live claim. `expiresIn`: how long that claim lives
     * unless renewed, in ms, on a `waiting` claim of a store that notifies
     * (see {@link IdempotencyStore.onSettled}): a crashed holder sends nothing,
     * so the waiter checks again then.
     */
    | { state: 'in_progress'; fingerprint: string; expiresIn?: number }
    /**
     * The operation finished earlier. `body` is omitted when the stored
     * fingerprint differs from the claimant's (the engine will refuse the
     * request, so there is no point in shipping the body).
     */
    | { state: 'completed' | 'failed'; fingerprint: string; body?: string }
    /**
     * The record was free for this claim (absent, or this token's own), but
     * the claim arrived after its `deadline`: nothing was changed.
     */
    | { state: 'late' }
  );

/**
 * What {@link IdempotencyStore.complete} did: `stored` the outcome; or not,
 * because another token's claim is live (`held`: it may still be released,
 * so trying again can succeed) or another outcome is stored (`finished`).
 */
export type CompleteResult = 'stored' | 'held' | 'finished';

export interface CompleteInput {
  id: string;
  /** The claim's fingerprint, written again if the record has to be recreated. */
  fingerprint: string;
  token: string;
  /** `completed` for a stored result, `failed` for a stored (replayable) error. */
  state: 'completed' | 'failed';
  /** The serialized outcome, replayed as is. */
  body: string;
  /** How long the outcome is kept, in milliseconds. */
  ttl: number;
  /**
   * The operation recorded steps (or resumed some): delete them with the
   * stored outcome, which retries replay instead. Absent for operations that
   * use no step.
   */
  clearSteps?: boolean;
}

/** One completed step of an operation, as the store keeps it. */
export interface RecordedStep {
  /** The step's name, unique within the operation. */
  name: string;
  /** The step's serialized result (the operation's codec). */
  body: string;
}

/** The steps recorded under a record id, in the order they completed. */
export interface RecordedSteps {
  /** The fingerprint of the request that recorded them. */
  fingerprint: string;
  steps: RecordedStep[];
}

export interface SaveStepInput {
  id: string;
  /** The holder's token: the step is recorded only while it holds the claim. */
  token: string;
  /** The claim's fingerprint, kept with the steps. */
  fingerprint: string;
  /** The step's position, from 0: it is recorded only right after the steps before it. */
  index: number;
  name: string;
  body: string;
  /**
   * How long the steps are kept, in milliseconds (the policy's `ttl`), from
   * this save: every step of the record lives as long as the last one.
   */
  ttl: number;
  /** The claim's lifetime (the policy's `lockTtl`), for a store that recreates a claim it lost (see {@link ExtendInput.fingerprint}). */
  lockTtl: number;
}

/**
 * What {@link IdempotencyStore.saveStep} did: `stored` the step (or found it
 * stored already, with the same name, by a save sent twice); `fenced`: the
 * token no longer holds a live claim; `conflict`: the steps recorded do not
 * end right before `index`, or another name is recorded there.
 */
export type SaveStepResult = 'stored' | 'fenced' | 'conflict';

export interface FencedInput {
  id: string;
  token: string;
}

export interface ExtendInput extends FencedInput {
  /** The new claim lifetime from now, in milliseconds. */
  lockTtl: number;
  /**
   * The claim's fingerprint. A store that can tell it lost its data (the
   * Redis store's `restartFence`) recreates the holder's claim with it
   * instead of answering that the claim is gone.
   */
  fingerprint: string;
}

/**
 * A transaction opened by a store for an operation that runs in
 * transactional mode: the operation makes its own writes through `handle`,
 * and the outcome is stored in the same transaction, so both commit or
 * neither does.
 */
export interface StoreTransaction {
  /** The driver's transaction (a Drizzle transaction for the Drizzle store). */
  readonly handle: unknown;
  /** As {@link IdempotencyStore.complete}, inside the transaction. */
  complete(input: CompleteInput): Promise<CompleteResult>;
}

export interface IdempotencyStore {
  /**
   * Optional: what operators may read and change (see {@link StoreAdmin}):
   * `idempotencyAdmin` and the CLI need it. The engine never uses it.
   */
  readonly admin?: StoreAdmin;
  /**
   * What kind of store this is, for telemetry: `memory`, `redis`,
   * `postgresql`. A bounded, low-cardinality name (never a host or a prefix);
   * events report `custom` for a store without one.
   */
  readonly name?: string;
  /** Atomically claims `id`, or reports the record that is there. */
  claim(input: ClaimInput): Promise<ClaimResult>;
  /**
   * Stores the outcome if `token` still holds the claim, or if the record is
   * absent or expired (no one else holds or ran it: it expired, was evicted or
   * lost in a restart). Sent twice by the same token, the second answer is
   * `stored` again without change. Any body string is kept as it is.
   */
  complete(input: CompleteInput): Promise<CompleteResult>;
  /**
   * Deletes the claim if `token` still holds it (live and in progress), so the
   * key can be retried. Returns false otherwise, including for a claim that
   * expired with no one taking it over.
   */
  release(input: FencedInput): Promise<boolean>;
  /** Renews the claim if `token` still holds it. Returns false if the claim was lost. */
  extend(input: ExtendInput): Promise<boolean>;
  /**
   * Optional: records a completed step of the operation that holds `id`,
   * fenced by its token. Steps outlive the claim: a release or an expired
   * claim keeps them, and the next claim that takes the record gets them
   * (`steps` on its `acquired` answer); a completion with `clearSteps`
   * deletes them. Stores that have it support `step()`.
   */
  saveStep?(input: SaveStepInput): Promise<SaveStepResult>;
  /**
   * Optional: calls `listener()` when the record `id` may have settled: it was
   * completed or released by a holder that was told someone waits, or
   * notifications that were down are back (one may have been lost meanwhile).
   * `listener(false)` when the store cannot notify any more (a lost
   * connection): the waiter polls, with bounded backoff, until the next call.
   * Returns the unsubscribe function. A subscribed waiter checks nothing else
   * but its holder's claim once it expires unless renewed (`expiresIn` on its
   * claim's answer, else after lockTtl) and its deadline: a store that loses a
   * notification without telling delays its waiters until then. A store without
   * `onSettled` is polled.
   */
  onSettled?(id: string, listener: (notifying?: boolean) => void): Promise<() => void>;
  /**
   * Optional: calls `listener` with the id of each finished record (`what`:
   * `outcome`, the default) or the steps a released or expired claim left
   * (`steps`) that the store drops before its ttl to make room (a bounded
   * store under pressure): a retry of that key would run the operation, or
   * those steps, again. Returns the unsubscribe function.
   */
  onEvicted?(listener: (id: string, what?: 'outcome' | 'steps') => void): () => void;
  /**
   * Optional: runs `fn` in a database transaction that commits when `fn`
   * resolves and rolls back when it throws. Stores that have it support
   * `transaction: true`.
   */
  transaction?<T>(fn: (tx: StoreTransaction) => Promise<T>): Promise<T>;
}

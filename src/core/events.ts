import { sha256Hex } from '#platform';

/** What a check or a transition ended in. */
export type IdempotencyEventResult =
  /** The claim was won: the operation runs now. */
  | 'acquired'
  /** A stored outcome was replayed (`bytes` says how large it was). */
  | 'replayed'
  /** The key was held by a running request: 409. */
  | 'in_progress'
  /** The key was used before with another payload: 422. */
  | 'mismatch'
  /** The outcome was stored (`state` says whether a result or a replayable error). */
  | 'completed'
  /** The claim was released so the key can be retried (`reason` says why: `operator` or `operator_forced` for an operator's release). */
  | 'released'
  /** An operator deleted a stored outcome (`state` says which) or recorded steps: a retry of that key runs the operation again. */
  | 'forgotten'
  /** The claim was lost while the operation ran (it outlived `lockTtl` without renewal). */
  | 'lease_lost'
  /** The claim was renewed while the operation ran (every `lockTtl / 3`). */
  | 'renewed'
  /**
   * A bounded store (the memory store) dropped a finished record before its ttl to make room: a retry
   * of that key would run again. With `reason: 'steps'`: the recorded steps a released or expired
   * claim left, and a retry would run those steps again.
   */
  | 'evicted'
  /** A store call failed or timed out (`operation` says which). */
  | 'store_error'
  /** The operation ran without protection: fail-open, or no key and not required. */
  | 'unprotected'
  /** The request was refused before reaching the store: key missing or invalid. */
  | 'rejected'
  /** A step of the operation finished: `reason` is `ran`, `resumed` (its recorded result was reused) or `unprotected` (run while failing open, not recorded); `step` names it. */
  | 'step';

/**
 * One structured event. It never carries the raw key, the scope or the
 * payload: `keyHash` is a truncated SHA-256 of the record's identity, enough
 * to correlate the events of one key in logs.
 */
export interface IdempotencyEvent {
  result: IdempotencyEventResult;
  /** The operation name: the tRPC procedure path. */
  name: string;
  /**
   * The store's name (`IdempotencyStore.name`: `memory`, `redis`,
   * `postgresql`), or `custom` for a store without one. Set by the engine on every event.
   */
  store?: string;
  /** First 16 hex characters of SHA-256(scope, name, key); absent when there was no valid key. */
  keyHash?: string;
  /** Time spent on the step this event reports, in milliseconds. */
  durationMs: number;
  /**
   * For `released`, `rejected`, `unprotected`, `lease_lost`: why. On `completed`
   * and `replayed`: `unreplayable` or `response_too_large` for an outcome that
   * ran but could not be stored (a marker is stored instead); `completed_late`
   * on `completed` for a completion that landed after a store failure. On
   * `store_error` of a completion: `gave_up` when no attempt was confirmed
   * within 2 × lockTtl of the first failure. On `evicted`: `steps` when what
   * went was the recorded steps a released or expired claim left, not a finished outcome.
   */
  reason?: string;
  /** For `completed`: which outcome was stored; for `replayed`: which was replayed (a result or an error). */
  state?: 'completed' | 'failed';
  /** For `replayed`: the size of the stored outcome sent back, in UTF-8 bytes (0 for an unreplayable one). */
  bytes?: number;
  /** For `store_error`: which store call failed. */
  operation?: 'claim' | 'complete' | 'release' | 'extend' | 'subscribe' | 'save_step';
  /** For `step`: the step's name. */
  step?: string;
  /** For `store_error`: the error's name and message (never its command arguments). */
  error?: { name: string; message: string };
}

export type IdempotencyEventHandler = (event: IdempotencyEvent) => void;

export function hashRecordId(id: string): string {
  return sha256Hex(id).slice(0, 16);
}

/** Name and message only: driver errors can hold command arguments (keys, bodies). */
export function describeError(error: unknown): { name: string; message: string } {
  if (error instanceof Error) return { name: error.name, message: error.message };
  return { name: 'Error', message: String(error) };
}

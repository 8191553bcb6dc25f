import type { OutcomeCodec } from './outcome-codec.js';
import type { ResolvedPolicy } from './policy.js';

/** One attempt at an operation under a key: what every part of the engine needs to know about it. */
export interface Attempt {
  /** The record's id: scope, operation name and key. */
  readonly id: string;
  /** The fingerprint of the operation name and payload. */
  readonly fp: string;
  /** This attempt's claim token: only its holder can complete, renew or release the claim. */
  readonly token: string;
  readonly policy: ResolvedPolicy;
  readonly codec: OutcomeCodec<unknown>;
  /** The operation's name. */
  readonly name: string;
  /** The hashed id events carry; undefined when nobody listens. */
  readonly keyHash: string | undefined;
  /**
   * When its last claim was sent (the engine clock's `now()` time; set by the guarded store): the claim
   * lives lockTtl from when the store took it, which is no earlier.
   */
  claimSentAt: number;
}

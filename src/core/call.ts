import { randomFillSync } from 'node:crypto';
import type { OutcomeCodec } from './codec.js';
import type { IdempotencyEvent } from './events.js';
import type { GuardedStore } from './guarded-store.js';
import type { ResolvedPolicy } from './policy.js';

/** One protected call: what every step of the engine needs to know about it. */
export interface Call {
  /** The record's id: scope, operation name and key. */
  readonly id: string;
  /** The fingerprint of the operation name and payload. */
  readonly fp: string;
  /** This call's claim token: only its holder can complete, renew or release the claim. */
  readonly token: string;
  readonly policy: ResolvedPolicy;
  readonly codec: OutcomeCodec<unknown>;
  readonly name: string;
  /** The hashed id events carry; undefined when nobody listens. */
  readonly keyHash: string | undefined;
}

/** What the engine's steps share: the store behind its guard, the event sink, the clock. */
export interface EngineScope {
  readonly store: GuardedStore;
  /** Emits an event built by the caller (a fresh object). */
  readonly emit: (event: IdempotencyEvent) => void;
  /** True when someone listens to events: only then are their costlier fields computed. */
  readonly observed: boolean;
  readonly now: () => number;
  /** Seconds a client is told to wait when its key is in flight. */
  readonly retryAfter: number;
}

// Claim tokens: 16 random bytes each (base64url), drawn from a pool refilled
// 256 tokens at a time, since a randomBytes call per request costs a system call.
const TOKEN_BYTES = 16;
const tokenPool = Buffer.alloc(TOKEN_BYTES * 256);
let tokenOffset = tokenPool.length;

/** A new claim token. */
export function newToken(): string {
  if (tokenOffset === tokenPool.length) {
    randomFillSync(tokenPool);
    tokenOffset = 0;
  }
  tokenOffset += TOKEN_BYTES;
  return tokenPool.toString('base64url', tokenOffset - TOKEN_BYTES, tokenOffset);
}

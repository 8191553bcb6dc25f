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

// Claim tokens: 16 random bytes each (base64url, 22 characters), drawn from a pool refilled 256 tokens at
// a time, since a randomBytes call per request costs a system call. The pool is encoded in one call per
// refill rather than one per token: each token's bytes sit in an 18-byte slot (24 characters) whose two
// last bytes are zero, so the slot's first 22 characters are exactly the token's own base64url.
const TOKEN_BYTES = 16;
const SLOT_BYTES = 18;
const SLOT_CHARS = 24;
const TOKEN_CHARS = 22;
const TOKENS = 256;
const tokenPool = Buffer.alloc(SLOT_BYTES * TOKENS);
let encodedPool = '';
let nextToken = TOKENS;

/** A new claim token. */
export function newToken(): string {
  if (nextToken === TOKENS) {
    randomFillSync(tokenPool);
    for (let slot = 0; slot < TOKENS; slot++)
      tokenPool.fill(0, slot * SLOT_BYTES + TOKEN_BYTES, (slot + 1) * SLOT_BYTES);
    encodedPool = tokenPool.toString('base64url');
    nextToken = 0;
  }
  const start = nextToken++ * SLOT_CHARS;
  return encodedPool.slice(start, start + TOKEN_CHARS);
}

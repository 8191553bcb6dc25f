import type { IdempotencyEvent } from './events.js';
import type { GuardedStore } from './guarded-store.js';

/** What the parts of one engine share: the store behind its guard, the event sink, the clock. */
export interface EngineRuntime {
  readonly store: GuardedStore;
  /** Emits an event built by the caller (a fresh object). */
  readonly emit: (event: IdempotencyEvent) => void;
  /** True when someone listens to events: only then are their costlier fields computed. */
  readonly observed: boolean;
  readonly now: () => number;
  /** Seconds a client is told to wait when its key is in flight. */
  readonly retryAfter: number;
}

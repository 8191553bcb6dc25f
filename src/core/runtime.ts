import type { EngineClock } from './clock.js';
import type { IdempotencyEvent } from './events.js';
import type { GuardedStore } from './guarded-store.js';
import type { ClockTimers } from './timing.js';

/** What the parts of one engine share: the store behind its guard, the event sink, the clocks. */
export interface EngineRuntime {
  readonly store: GuardedStore;
  /** Emits an event built by the caller (a fresh object). */
  readonly emit: (event: IdempotencyEvent) => void;
  /** True when someone listens to events: only then are their costlier fields computed. */
  readonly observed: boolean;
  /** The wall clock (the `now` option): deadlines of waits. */
  readonly now: () => number;
  /** The monotonic clock and the timers (clock.ts): every other time the engine reads or waits for. */
  readonly clock: EngineClock;
  /** The timer queues of {@link clock}. */
  readonly timers: ClockTimers;
  /** Seconds a client is told to wait when its key is in flight. */
  readonly retryAfter: number;
}
